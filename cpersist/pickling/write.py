"""Writing an object as a cpersist dump whose arrays are sections: the
pickler's ``store`` puts each array in a section of its own, the pickle
stream is encoded on the pool while pickling goes on, and the stream
becomes the root section once the object is pickled.
"""

import io

import numpy as np

from .. import __version__
from ..container import ContainerWriter, EncodedStream
from ..container.files import header_place, restate_minor
from ..container.layout import BLOCKS_MINOR
from ..container.direct_io import DirectFile
from ..container.gathering import GatheringFile
from .object_paths import object_paths
from .arrays import describe, rows_per_chunk
from .array_pickler import ArrayPickler
from .buffer_blocks import BlockWriter
from .snapshot import chunks_to_write

#: Chunk size of the pickle stream: smaller than array chunks so that its
#: compression, which overlaps pickling, spreads evenly over the threads.
PICKLE_CHUNK_SIZE = 1 << 20
#: In compressed files, arrays smaller than this (and than one chunk) are
#: kept in the pickle stream.
INLINE_BELOW = 64 << 10
#: In raw files, arrays smaller than this are kept in the pickle stream: a
#: section costs about 15 µs to write and to read whatever its size, more
#: than copying an array of this size through the stream costs (its bytes
#: sit in the pickler's frames of 64 KiB and are copied once out of them on
#: load, as pickle does, trusted or restricted); from this size on, an
#: array's bytes bypass the frames, and reading a section straight into the
#: array costs as much or less. Such arrays load into memory, never
#: memory-mapped.
RAW_INLINE_BELOW = 64 << 10
#: Files of at least this many array sections record each array's path in
#: the index (when the object is plain containers around its arrays), so
#: that listing them reads no more than the index: reading and walking the
#: pickle stream would cost about as much again as opening the file, a
#: large share of a small slice of a file opened for it.
RECORD_PATHS_FROM = 1
#: File objects whose ``write`` copies the bytes it is given, or writes them
#: out before it returns, keeping no reference to them.
COPYING_FILES = (io.BufferedWriter, io.BufferedRandom, io.FileIO, io.BytesIO, DirectFile,
                 GatheringFile)


class SectionWriter:
    """A dump with each array a section, being written to ``file``.

    The pickler writes its stream to :attr:`stream` and hands each array to
    :meth:`store`; :meth:`finish` then writes the stream as the root section,
    and the index.

    Parameters
    ----------
    file : binary file object
    name : str
        Named in errors.
    codec : Codec or None
    protocol : int
        Recorded in the index.
    chunk_size : int
        Bytes of array data per chunk.
    n_threads : int
    pickle_chunk_size : int
        Bytes of pickle stream per chunk (at most ``chunk_size``).
    payload_at : int, optional
        Where ``file`` is: the payload of a growing object file's commit
        frame, the dump's index the commit's (its offsets count from the
        start of the file); None: a dump of its own.
    stream_in_file : bool
        No array section written yet: a raw stream is written straight into
        ``file`` as it comes, if its descriptor reads back (taken back out
        at the first array section: :mod:`cpersist.container.stream_in_file`),
        rather than gathered in memory.
    blocks : bool
        Small arrays' bytes may go to buffer blocks (:mod:`.buffer_blocks`):
        :attr:`blocks` is made, whose ``take`` is the pickler's
        ``buffer_callback``, where ``file`` can go back to its header (a
        dump holding blocks states format 2.5 there once written: the
        header is written before any array is met). Elsewhere (a pipe, a
        direct file, a file in append mode) they stay in the stream.

    Attributes
    ----------
    blocks : BlockWriter or None
    """

    def __init__(self, file, name, codec, protocol, chunk_size, n_threads,
                 pickle_chunk_size=PICKLE_CHUNK_SIZE, payload_at=None, stream_in_file=False,
                 blocks=False):
        self.blocks = None
        self._header_at = header_place(file) if blocks else None
        if self._header_at is not None:
            self.blocks = BlockWriter(self._add_block, chunk_size,
                                      reuse=codec is not None or type(file) in COPYING_FILES)
        if payload_at is None:
            self.writer = ContainerWriter(file, n_threads, name)
        else:
            # Imported here: other dumps need none of the growing files' format.
            from ..container.frames import OBJECT_MINOR

            self.writer = ContainerWriter(file, n_threads, name, start=payload_at,
                                          minor=OBJECT_MINOR)
        self.store = array_store(self.writer, codec, chunk_size)
        stream_chunk = min(chunk_size, pickle_chunk_size)
        self.stream = self._in_file = None
        if stream_in_file and codec is None:
            self.stream = self._in_file = self.writer.in_file_stream(stream_chunk)
        if self.stream is None:
            # The pickle stream is encoded chunk by chunk on the pool while
            # pickling goes on.
            self.stream = EncodedStream(codec, stream_chunk, n_threads)
        else:
            stored = self.store

            def store(arr, favour_speed=False):
                if self._in_file is not None:  # the stream leaves the file first
                    self.stream, self._in_file = self._in_file.withdraw(), None
                return stored(arr, favour_speed)

            self.store = store
        self._codec, self._name = codec, name
        self._block_chunk, self._n_threads = stream_chunk, n_threads
        self._protocol = protocol
        self._file = file

    def _add_block(self, chunks, meta, size):
        """Write a buffer block as a section (the stream leaves the file
        first, as for an array's), every chunk written when it returns."""
        if self._in_file is not None:
            self.stream, self._in_file = self._in_file.withdraw(), None
        codec = self._codec
        if codec is None:
            self.writer.add_section(chunks, meta=meta, size=size, release=_written)
            return
        # Encoded as the stream is, in chunks of its size by this thread and
        # the pool together (copied out of the block, which serves the next):
        # a block handed to the pool whole would leave this thread waiting.
        encoded = EncodedStream(codec, self._block_chunk, self._n_threads)
        for chunk in chunks:
            encoded.write(chunk)
        self.writer.add_encoded_section(encoded.encoded_chunks(), codec=codec, meta=meta)

    def finish(self, obj, placed, record_paths=True):
        """Write the root section and the index; ``placed``: the pickler's
        :attr:`~.pickler.ArrayPickler.placed`, to record the arrays' paths.

        The paths are found by a second, breadth-first walk over ``obj``
        (:func:`cpersist.pickling.object_paths.object_paths`), not while
        pickling: the C pickler, which pickles dicts, lists and strings
        without calling back into Python, does not say where in the object
        an array it hands to ``reducer_override`` sits, and tracking the
        path would mean pickling every container in Python. The walk is
        bounded by the number of sections (it gives up on large or unusual
        objects, whose readers then walk the pickle stream).
        """
        writer = self.writer
        blocks, n_blocks = self.blocks, 0
        if blocks is not None:
            blocks.flush()
            blocks.close()
            n_blocks = blocks.count
        n_arrays = writer.n_sections - n_blocks
        if record_paths and n_arrays >= RECORD_PATHS_FROM:
            paths = object_paths(obj, placed, n_arrays)
            if paths is not None:
                for section, path in paths.items():
                    writer.section_meta(section)["path"] = path
        if self._in_file is not None:
            root = self._in_file.add_section(meta=dict(ROOT_META))
            writer.finish(root, info=dump_info(self._protocol))
            return
        finish_dump(writer, self.stream.encoded_chunks(), self._codec, self._protocol,
                    n_blocks > 0)
        if n_blocks:
            restate_minor(self._file, self._header_at, BLOCKS_MINOR, self._name)
        if type(self._file) in COPYING_FILES:
            # Their write() has copied the stream's chunks: the buffers
            # serve the next dump. (Another file object may keep what it
            # was given: its buffers are left to it.)
            self.stream.release()


def _written():
    """A block's chunks are lent: the writer writes them before it returns."""


def write_sections(obj, file, name, codec, protocol, chunk_size, n_threads,
                   pickle_chunk_size=PICKLE_CHUNK_SIZE, fortran_as_c=False,
                   inline_below=INLINE_BELOW, payload_at=None):
    """Write ``obj`` with each array a section (in a compressed file, those
    under ``inline_below`` bytes in the pickle stream); return the
    :class:`ArrayPickler` (see it for ``fortran_as_c``; ``payload_at`` as
    for :class:`SectionWriter`)."""
    sections = SectionWriter(file, name, codec, protocol, chunk_size, n_threads,
                             pickle_chunk_size, payload_at)
    pickler = ArrayPickler(sections.stream, protocol, sections.store,
                           inline_below_for(codec, chunk_size, inline_below), fortran_as_c)
    pickler.dump(obj)
    sections.finish(obj, pickler.placed, record_paths=not fortran_as_c)
    return pickler


def inline_below_for(codec, chunk_size, inline_below=INLINE_BELOW):
    """Bytes under which an array is kept in the pickle stream: in a
    compressed file, small arrays compress better together, and there is no
    memmap to lose; in a raw one, only arrays whose section would cost more
    than the array (:data:`RAW_INLINE_BELOW`), so that a model of hundreds
    of small arrays dumps and loads as fast as pickle does."""
    if codec is None:
        return min(RAW_INLINE_BELOW, inline_below, chunk_size)
    return min(inline_below, chunk_size)


def array_store(writer, codec, chunk_size):
    """The ``store`` function of :class:`ArrayPickler`: each array a section,
    compressed by ``codec.favouring_speed()`` when the pickler says its
    data favours speed (made on the first such array: most dumps hold none)."""
    fast = None

    def store(arr, favour_speed=False):
        nonlocal fast
        chosen = codec
        if favour_speed and codec is not None:
            if fast is None:
                fast = codec.favouring_speed()
            chosen = fast
        if not isinstance(arr, np.ndarray):
            # A dask_arrays.StreamedSource: made (computed, or read from its
            # batches) as the writer takes its chunks.
            rows, step = arr.step(chunk_size)
            chunks, release = arr.chunks_to_write(step, compressed=chosen is not None)
            meta = arr.describe()
        else:
            # In a background dump, chunks of an array its snapshot has not
            # copied yet come from the original, which the writer releases.
            chunks, release = chunks_to_write(arr, chunk_size)
            if type(chunks) is tuple:  # one chunk: no rows to count
                rows = None
            else:
                if arr.nbytes <= chunk_size:
                    chunks = tuple(chunks)  # one chunk (or none): the writer's fast path
                rows = rows_per_chunk(arr, chunk_size)
            meta = describe(arr)
        if rows is not None:
            meta["rows_per_chunk"] = rows
        return writer.add_section(
            chunks,
            codec=chosen,
            typesize=arr.dtype.itemsize,
            meta=meta,
            size=arr.nbytes,
            release=release,
        )

    return store


def finish_dump(writer, encoded, codec, protocol, blocks=False):
    """Write the pickle stream's encoded chunks as the root section, and the
    index (``blocks``: some sections are buffer blocks)."""
    root = writer.add_encoded_section(encoded, codec=codec, meta=dict(ROOT_META))
    writer.finish(root, info=dump_info(protocol), blocks=blocks)


#: The ``meta`` of a dump's root section.
ROOT_META = {"kind": "pickle"}


def dump_info(protocol):
    """The ``info`` of a dump's index."""
    return {"writer": f"cpersist {__version__}", "protocol": protocol}
