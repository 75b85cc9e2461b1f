"""The dump of ``compress="max"``: of several layouts of one object, the
smallest file.

A small object is written every way below, each into memory, and the
smallest file is kept:

* each array a section (small ones in the pickle stream), as every codec
  writes it, and, if the object holds such small arrays, every array a
  section;
* the whole pickle stream with every array inside it, compressed as one
  chunk: one stream finds what repeats across arrays (the same data held
  twice) and what many small arrays share (a fitted model's trees), and
  costs one index entry instead of one per array; and, for a stream of at
  most :data:`TINY_UP_TO` bytes, as a tiny dump
  (:mod:`cpersist.container.tiny`), whose 13 bytes of framing and built-in
  dictionary suit objects of a few hundred bytes;
* when the object holds Fortran-ordered arrays, both again with those
  arrays stored in C order (see :class:`~cpersist.pickling.array_pickler.ArrayPickler`).

"Small" means a pickle stream, arrays inside, of at most
:data:`WHOLE_STREAM_UP_TO` bytes: that stream and the candidate files are
held in memory, and one LZMA2 chunk of it needs a dictionary as large.
Larger objects are written with each array a section, straight to the
target, where the index is a negligible part of the file.
"""

import io

from ..container import ENCODED, VERBATIM, ContainerWriter, checksum, encode_chunk
from ..container.tiny import MAX_STREAM, tiny_dump
from .array_pickler import ArrayPickler
from .write import INLINE_BELOW, finish_dump, write_sections

#: Largest pickle stream (arrays inside) written as one chunk, or as a tiny dump.
WHOLE_STREAM_UP_TO = MAX_STREAM
#: Largest pickle stream also tried as a tiny dump: a tiny dump saves about
#: a hundred bytes of framing, which only a small file notices.
TINY_UP_TO = 64 << 10



class _TooLarge(Exception):
    """Pickling met an array for a section, or passed the stream's limit."""


class _BoundedBuffer(io.BytesIO):
    def __init__(self, limit):
        super().__init__()
        self._limit = limit

    def write(self, data):
        if self.tell() + memoryview(data).nbytes > self._limit:
            raise _TooLarge
        return super().write(data)


def _refuse(arr, favour_speed=False):
    raise _TooLarge


def whole_stream(obj, protocol, fortran_as_c=False):
    """``(stream, saw_fortran)``: the pickle stream of ``obj`` with every
    array inside it, or None for the stream when it would pass
    :data:`WHOLE_STREAM_UP_TO` bytes."""
    buf = _BoundedBuffer(WHOLE_STREAM_UP_TO)
    pickler = ArrayPickler(buf, protocol, _refuse, WHOLE_STREAM_UP_TO + 1, fortran_as_c)
    try:
        pickler.dump(obj)
    except _TooLarge:
        return None, pickler.saw_fortran
    return buf.getvalue(), pickler.saw_fortran


def _one_chunk_dump(stream, name, codec, protocol):
    """A dump whose only section is ``stream``, encoded as one chunk.

    Encoded even where a sample of it shows no saving: a sample cannot see
    data repeated further apart than it is long, which the whole stream
    may hold (the same array twice).
    """
    out = io.BytesIO()
    writer = ContainerWriter(out, 1, name)
    stored, digest, flag = encode_chunk(codec, memoryview(stream))
    if flag == VERBATIM:
        encoded = codec.encode(memoryview(stream), 1)
        if len(encoded) < len(stream):
            stored, digest, flag = encoded, checksum(encoded), ENCODED
    finish_dump(writer, [(stored, len(stream), digest, flag)], codec, protocol)
    return out.getvalue()


def _sections_dump(obj, name, codec, protocol, chunk_size, n_threads, fortran_as_c,
                   inline_below):
    """``(dump, arrays kept in its pickle stream)``."""
    out = io.BytesIO()
    # Small arrays stay in the stream (no buffer blocks): "max" is for the
    # smallest file, and they compress best beside each other and the stream.
    pickler = write_sections(obj, out, name, codec, protocol, chunk_size, n_threads,
                             pickle_chunk_size=chunk_size, fortran_as_c=fortran_as_c,
                             inline_below=inline_below)
    return out.getvalue(), pickler.inlined


def write_smallest(obj, target, codec, protocol, chunk_size, n_threads):
    """Write to ``target`` (see :mod:`cpersist.container.targets`) the
    smallest dump of ``obj`` (see the module's doc)."""
    name = target.name
    stream, fortran = whole_stream(obj, protocol)
    if stream is None:
        # The pickle stream in chunks as large as the arrays': the back ends
        # find more to match in a larger chunk.
        write_sections(obj, target.file(), name, codec, protocol, chunk_size, n_threads,
                       pickle_chunk_size=chunk_size)
        return
    candidates = [_one_chunk_dump(stream, name, codec, protocol)]
    if len(stream) <= TINY_UP_TO:
        candidates.append(tiny_dump(stream))
    del stream
    for fortran_as_c in (False, True) if fortran else (False,):
        if fortran_as_c:
            transposed, _ = whole_stream(obj, protocol, fortran_as_c=True)
            if transposed is not None:
                candidates.append(_one_chunk_dump(transposed, name, codec, protocol))
                if len(transposed) <= TINY_UP_TO:
                    candidates.append(tiny_dump(transposed))
            del transposed
        dump, inlined = _sections_dump(obj, name, codec, protocol, chunk_size, n_threads,
                                       fortran_as_c, INLINE_BELOW)
        candidates.append(dump)
        if inlined:
            # Small arrays as sections of their own: each then starts a
            # chunk, on which the codec's filters see whole items.
            candidates.append(_sections_dump(obj, name, codec, protocol, chunk_size,
                                             n_threads, fortran_as_c, 0)[0])
        candidates = [min(candidates, key=len)]
    target.write_whole(candidates[0])
