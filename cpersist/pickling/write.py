"""Writing an object as a cpersist dump whose arrays are sections: the
pickler's ``store`` puts each array in a section of its own, the pickle
stream is encoded on the pool while pickling goes on, and the stream
becomes the root section once the object is pickled.
"""

from .. import __version__
from ..container import ContainerWriter, EncodedStream
from ..stream.object_paths import object_paths
from .arrays import describe, iter_chunks, rows_per_chunk
from .pickler import ArrayPickler
from .snapshot import wait_for_copy

#: Chunk size of the pickle stream: smaller than array chunks so that its
#: compression, which overlaps pickling, spreads evenly over the threads.
PICKLE_CHUNK_SIZE = 1 << 20
#: In compressed files, arrays smaller than this (and than one chunk) are
#: kept in the pickle stream.
INLINE_BELOW = 64 << 10
#: Files of at least this many array sections record each array's path in
#: the index (when the object is plain containers around its arrays), so
#: that listing them reads no more than the index: reading and walking the
#: pickle stream would cost about as much again as opening the file, a
#: large share of a small slice of a file opened for it.
RECORD_PATHS_FROM = 1



def write_sections(obj, file, name, codec, protocol, chunk_size, n_threads,
                   pickle_chunk_size=PICKLE_CHUNK_SIZE, fortran_as_c=False,
                   inline_below=INLINE_BELOW):
    """Write ``obj`` with each array a section (in a compressed file, those
    under ``inline_below`` bytes in the pickle stream); return the
    :class:`ArrayPickler` (see it for ``fortran_as_c``)."""
    writer = ContainerWriter(file, n_threads, name)
    store = _array_store(writer, codec, chunk_size)

    # The pickle stream is encoded chunk by chunk on the pool while pickling
    # goes on. In a compressed file, small arrays go into it too: they
    # compress better together, and there is no memmap to lose.
    stream = EncodedStream(codec, min(chunk_size, pickle_chunk_size), n_threads)
    inline_below = _inline_below(codec, chunk_size, inline_below)
    pickler = ArrayPickler(stream, protocol, store, inline_below, fortran_as_c)
    pickler.dump(obj)
    n_sections = writer.n_sections
    if n_sections >= RECORD_PATHS_FROM and not fortran_as_c:
        paths = object_paths(obj, pickler.placed, n_sections)
        if paths is not None:
            for section, path in paths.items():
                writer.section_meta(section)["path"] = path
    _finish(writer, stream.encoded_chunks(), codec, protocol)
    return pickler


def _inline_below(codec, chunk_size, inline_below=INLINE_BELOW):
    """Bytes under which an array is kept in the pickle stream."""
    return 0 if codec is None else min(inline_below, chunk_size)


def _array_store(writer, codec, chunk_size):
    """The ``store`` function of :class:`ArrayPickler`: each array a section,
    compressed by ``codec.favouring_speed()`` when the pickler says its
    data favours speed (made on the first such array: most dumps hold none)."""
    fast = None

    def store(arr, favour_speed=False):
        nonlocal fast
        wait_for_copy(arr)  # a background dump's snapshot may still be copying it
        chosen = codec
        if favour_speed and codec is not None:
            if fast is None:
                fast = codec.favouring_speed()
            chosen = fast
        chunks = iter_chunks(arr, chunk_size)
        if arr.nbytes <= chunk_size:
            chunks = tuple(chunks)  # one chunk (or none): the writer's fast path
        meta = describe(arr)
        rows = rows_per_chunk(arr, chunk_size)
        if rows is not None:
            meta["rows_per_chunk"] = rows
        return writer.add_section(
            chunks,
            codec=chosen,
            typesize=arr.dtype.itemsize,
            meta=meta,
            size=arr.nbytes,
        )

    return store


def _finish(writer, encoded, codec, protocol):
    """Write the pickle stream's encoded chunks as the root section, and the index."""
    root = writer.add_encoded_section(encoded, codec=codec, meta={"kind": "pickle"})
    writer.finish(root, info={"writer": f"cpersist {__version__}", "protocol": protocol})
