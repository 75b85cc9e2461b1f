"""cpersist's own storage methods and the registry of every method
(cpersist's, then the peers of :mod:`cpersist.benchmarks.peers_classic` and
:mod:`cpersist.benchmarks.peers`); the interface is :class:`.method.Method`.

What a cpersist setting could reach at best on a dataset (:class:`Limit`):
its codec alone, encoding (dump) or decoding into new memory (load) the
arrays' chunks on the same threads, with no file (a cold read's disk time
counts against the row), pickling or checksums (raw: a copy). The storage
suite's ``write_of_limit`` and ``read_of_limit`` are each row's time against it.
"""

import io
import pickle
import time

import numpy as np

import cpersist

from .._runtime.parallel import run_claimed
from .._runtime.threads import default_n_threads
from ..codecs import parse_compress
from ..container import DEFAULT_CHUNK_SIZE, ContainerReader
from ..container.encode import _compressed
from ..container.layout import VERBATIM
from ..container.sources import source_for
from ..pickling.arrays import is_plain_data, iter_chunks
from .method import Method
from .peers import peer_methods
from .peers_classic import classic_methods

#: The level grid of the default run: raw, a fast level and a strong one
#: (level 9 of the Blosc-based peers alone would take longer than the rest).
DEFAULT_LEVELS = (0, 3, 6)
#: The level grid of ``--full``.
FULL_LEVELS = (0, 1, 3, 6, 9)

#: cpersist's best-ratio preset (``compress="max"``): a method of its own.
MAX_PRESET = "max"


class Cpersist(Method, name="cpersist", family="cpersist", codec="default", suffix=".cp",
               supported=tuple(range(10))):
    """``cpersist.dump(obj, path, compress=level)``: default codec, 0 = raw."""

    note = "compress=<int level>: the default codec; level 0 = raw"

    def __init__(self, threads=None):
        self.threads = threads

    def _compress(self, level):
        return level

    def write(self, obj, path, level):
        cpersist.dump(obj, path, compress=self._compress(level), n_threads=self.threads)

    def read(self, path):
        return cpersist.load(path, n_threads=self.threads)

    def limit(self, obj, level):
        """The codec-alone work of this setting on ``obj``
        (:class:`Limit`), on the threads a dump would use."""
        return Limit(obj, self._compress(level), self.threads or default_n_threads())

    @staticmethod
    def kept_raw(path):
        """The fraction of a cpersist file's array bytes stored verbatim
        (a chunk the codec would save too little on), or None for a file with
        no compressed array section."""
        with open(path, "rb") as file:
            try:
                reader = ContainerReader(source_for(file, path, owned=False), whole=True)
            except Exception:  # a file of another layout (a tiny file): nothing to say
                return None
            chunks = [chunk for section in reader.sections
                      if section.index != reader.root and section.codec is not None
                      for chunk in section.chunks]
        total = sum(chunk.raw_length for chunk in chunks)
        kept = sum(chunk.raw_length for chunk in chunks if chunk.flag == VERBATIM)
        return kept / total if total else None


class CpersistCodec(Cpersist, supported=tuple(range(1, 10)), note=""):
    """``cpersist.dump(obj, path, compress=(codec, level))``."""

    def __init__(self, codec, threads=None):
        super().__init__(threads)
        self.codec = codec
        self.name = f"cpersist:{codec}"

    def _compress(self, level):
        return (self.codec, level)


class CpersistMax(Cpersist, name="cpersist max", codec=MAX_PRESET, supported=(9,), fixed_level=9):
    """``cpersist.dump(obj, path, compress="max")``: the smallest file cpersist makes."""

    note = 'compress="max" (a preset, no level: reported as 9)'

    def _compress(self, level):
        return MAX_PRESET

    def limit(self, obj, level):
        """None: the preset tries several codecs per chunk, no one of them
        bounds it."""
        return None


class CpersistMmap(Cpersist, name="cpersist-mmap", codec="none", mmap=True, fixed_level=0):
    """Raw cpersist file read with ``mmap_mode='r'`` (every byte touched)."""

    note = "compress=0, load(mmap_mode='r'); read time includes touching every byte"

    def read(self, path):
        return cpersist.load(path, mmap_mode="r")


def all_methods(threads=None):
    """Every method, in display order (including ones not installed here);
    ``threads`` goes to cpersist as ``n_threads``: with several counts, every
    cpersist method comes once per count, named with the suffix ``@<N>t``."""
    counts = list(threads) if isinstance(threads, (list, tuple)) else [threads]
    codecs, ms = cpersist.available_codecs(), []
    for count in counts:
        group = [Cpersist(count), CpersistMmap(count)]
        if MAX_PRESET in codecs:
            group.append(CpersistMax(count))
        group += [CpersistCodec(c, count) for c in codecs if c != MAX_PRESET]
        if len(counts) > 1:
            for m in group:
                m.name += f"@{count}t"
        ms += group
    return ms + classic_methods() + peer_methods()


def select_methods(patterns, available):
    """Methods by names or shell patterns (``cpersist*``, ``tables:*``) or family."""
    from .datasets import select
    return select(patterns, available, "family", "method")


class _Collector(pickle.Pickler):
    """Collects the plain arrays an object holds (as cpersist's pickler meets
    them), pickling everything else to nowhere."""

    def __init__(self):
        super().__init__(io.BytesIO(), 5)
        self.arrays = []

    def reducer_override(self, obj):
        if type(obj) in (np.ndarray, np.memmap) and is_plain_data(obj):
            self.arrays.append(obj.view(np.ndarray))
            return tuple, ()
        return NotImplemented


def arrays_of(obj):
    """The plain numpy arrays ``obj`` holds, each once."""
    if type(obj) in (np.ndarray, np.memmap):
        return [obj.view(np.ndarray)] if is_plain_data(obj) else []
    collector = _Collector()
    collector.dump(obj)
    return collector.arrays


class Limit:
    """The codec-alone work of dumping and loading ``obj`` with ``compress``
    (as :func:`cpersist.dump`'s; ``"max"`` is not a codec: refused) on
    ``n_threads`` threads, in chunks of ``chunk_size`` bytes;
    :meth:`encode_s` and :meth:`decode_s` time it."""

    def __init__(self, obj, compress, n_threads, chunk_size=DEFAULT_CHUNK_SIZE):
        self.codec = parse_compress(compress)
        if self.codec is not None and self.codec.codec_id == "max":
            raise ValueError("compress='max' tries several codecs: it has no single limit")
        self.n_threads = max(1, n_threads)
        # Where each chunk decodes to: (its array's number, offset in it);
        # and the size of each array.
        self.chunks, self._places, self._sizes = [], [], []
        for number, arr in enumerate(arrays_of(obj)):
            offset = 0
            for chunk in iter_chunks(arr, chunk_size):
                self.chunks.append((memoryview(chunk), arr.dtype.itemsize))
                self._places.append((number, offset))
                offset += chunk.nbytes
            self._sizes.append(offset)
        self.encoded = None

    def encode_s(self):
        """Seconds to encode every chunk (raw: to copy it into new memory)."""
        chunks, codec, out = self.chunks, self.codec, [None] * len(self.chunks)

        def task(claims):
            for i in claims:
                chunk, typesize = chunks[i]
                if codec is None:  # nothing kept: the load copies the chunk again
                    np.empty(chunk.nbytes, dtype=np.uint8)[:] = chunk
                else:
                    out[i] = _compressed(codec, chunk, typesize)

        t0 = time.perf_counter()
        run_claimed(task, len(chunks), self.n_threads)
        elapsed = time.perf_counter() - t0
        self.encoded = out
        return elapsed

    def decode_s(self):
        """Seconds to decode every chunk :meth:`encode_s` made into new
        memory (a chunk kept verbatim, or raw: copied)."""
        t0 = time.perf_counter()
        arrays = self.decoded()
        elapsed = time.perf_counter() - t0
        del arrays  # freed untimed, as a load's result is
        return elapsed

    def decoded(self):
        """What :meth:`decode_s` times: every array's chunks decoded into
        new memory of the array's size (as a load allocates, paying for fresh
        pages, which reused chunk buffers would not). Returns the arrays."""
        if self.encoded is None:
            self.encode_s()
        chunks, places, encoded, codec = self.chunks, self._places, self.encoded, self.codec
        arrays = [np.empty(size, dtype=np.uint8) for size in self._sizes]

        def task(claims):
            for i in claims:
                chunk = chunks[i][0]
                number, offset = places[i]
                target = arrays[number][offset:offset + chunk.nbytes]
                stored = encoded[i]
                if codec is None or stored is None:
                    target[:] = chunk
                else:
                    codec.decode_into(stored, memoryview(target))

        run_claimed(task, len(chunks), self.n_threads)
        return arrays
