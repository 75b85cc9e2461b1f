"""What a cpersist setting could reach at best on a dataset: its codec alone,
encoding (dump) or decoding into new memory (load) the arrays' chunks on
the same threads, with no file, pickling or checksums (raw: a copy). The
storage suite's ``write_of_limit`` and ``read_of_limit`` are each row's
time against it. The limit reads nothing: a read from a file not in the
page cache is held against it with the disk's part in it.
"""

import io
import pickle
import time

import numpy as np

from .._runtime.parallel import run_claimed
from ..codecs import parse_compress
from ..container import DEFAULT_CHUNK_SIZE
from ..container.encode import _compressed
from ..pickling.arrays import is_plain_data, iter_chunks

__all__ = ["arrays_of", "Limit"]


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
    on ``n_threads`` threads; :meth:`encode_s` and :meth:`decode_s` time it.

    Parameters
    ----------
    obj : object
    compress : as :func:`cpersist.dump`'s (``"max"`` is not a codec: refused)
    n_threads : int
    chunk_size : int
    """

    def __init__(self, obj, compress, n_threads, chunk_size=DEFAULT_CHUNK_SIZE):
        self.codec = parse_compress(compress)
        if self.codec is not None and self.codec.codec_id == "max":
            raise ValueError("compress='max' tries several codecs: it has no single limit")
        self.n_threads = max(1, n_threads)
        self.chunks = []
        # Where each chunk decodes to: (its array's number, offset in it).
        self._places = []
        self._sizes = []
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
        chunks = self.chunks
        out = [None] * len(chunks)
        codec = self.codec

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
