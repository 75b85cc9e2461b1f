"""Out-of-band buffer blocks (format 2.5): the bytes of a sectioned dump's
small arrays kept out of its pickle stream, many to a section.

A model holds hundreds of small arrays, which a sectioned dump keeps inside
its pickle stream (a section each would cost more than the array). Loaded
from there, each array's bytes are copied once more out of the stream's
buffer; ``pickle.load`` does the same, and the load costs what pickle's
does. At protocol 5 the pickler hands each such array's buffer to a
``buffer_callback``: those of :data:`OUT_OF_BAND_FROM` bytes or more are
copied, in stream order, into *blocks* of at most :data:`BLOCK_BYTES`, each
an ordinary section (``meta`` ``{"kind": "buffers", "sizes": [...]}``),
and the stream holds ``NEXT_BUFFER`` in their place. A load reads each
block by one call into memory new to it, and the arrays view their parts
of it: the copy out of the stream is gone.

Smaller buffers stay in the stream: one array kept alive keeps its whole
block in memory, which is worth it only for arrays that are not tiny.
"""

import itertools
import operator
import threading

import numpy as np

from .._runtime.pages import fault_in
from ..container.layout import BLOCK_KIND
from ..exceptions import CorruptFileError

#: Buffers of fewer bytes stay in the pickle stream.
OUT_OF_BAND_FROM = 1 << 10
#: Most bytes of one block; a buffer never spans two. Also the most bytes
#: one small array kept alone keeps in memory after a load.
BLOCK_BYTES = 4 << 20
#: Bytes of such buffers a sectioned dump keeps in its stream before its
#: first block: a dump of a few small arrays is written as it was (format
#: 2.2, which older readers read), a model of hundreds gets blocks.
IN_STREAM_FIRST = 64 << 10
#: Each buffer starts at a multiple of this in its block: the alignment
#: numpy and SIMD code like, as in a raw section.
BUFFER_ALIGN = 64

_ZEROS = bytes(BUFFER_ALIGN)
_kept = threading.local()  # .block: a thread's block memory, kept between dumps


def _aligned(n):
    return -(-n // BUFFER_ALIGN) * BUFFER_ALIGN


class BlockWriter:
    """The blocks of one dump, filled by the pickler's ``buffer_callback``.

    Parameters
    ----------
    add_section : callable
        ``add_section(chunks, meta, size)`` writes a block as a section
        (every chunk written, nothing of it read any more, when it returns).
    chunk_size : int
        Bytes per chunk of a block's section.
    reuse : bool
        The file copies what it is written (it keeps no view of it): one
        block's memory serves every block of the dump, and is kept for the
        thread's next dump, so that a dump faults no new memory in.
    """

    def __init__(self, add_section, chunk_size, reuse):
        self._add_section = add_section
        self._chunk_size = chunk_size
        self._reuse = reuse
        self._memory = None
        self._fill = 0
        self._sizes = []
        self._in_stream = 0  # bytes of buffers kept in the stream, up to IN_STREAM_FIRST
        self.count = 0  # blocks written

    def take(self, buffer):
        """The ``buffer_callback``: copy ``buffer`` (a
        :class:`pickle.PickleBuffer`) into the block and return False
        (out of band), or return True (in the stream) for one under
        :data:`OUT_OF_BAND_FROM` bytes, over :data:`BLOCK_BYTES`, among the
        first :data:`IN_STREAM_FIRST` bytes, or not contiguous (which the
        pickler then refuses, as without blocks)."""
        # Called for each of a model's hundreds of small arrays: lean.
        try:
            raw = buffer.raw()
        except BufferError:
            return True
        n = raw.nbytes
        if n < OUT_OF_BAND_FROM or n > BLOCK_BYTES:
            return True
        if self._in_stream < IN_STREAM_FIRST:
            self._in_stream += n
            return True
        at = -(-self._fill // BUFFER_ALIGN) * BUFFER_ALIGN
        end = at + n
        if end > BLOCK_BYTES and self._sizes:
            self.flush()
            at, end = 0, n
        memory = self._memory
        if memory is None:
            memory = self._memory = self._new_memory()
        if at > self._fill:
            # The padding before a buffer: new memory holds whatever the
            # allocator left there, reused memory the last dump's bytes.
            memory[self._fill:at] = _ZEROS[:at - self._fill]
        memory[at:end] = raw
        self._fill = end
        self._sizes.append(n)
        return False

    def _new_memory(self):
        if self._reuse:
            memory = getattr(_kept, "block", None)
            if memory is not None:
                _kept.block = None
                return memory
        return memoryview(np.empty(BLOCK_BYTES, np.uint8))

    def flush(self):
        """Write the block being filled, if it holds a buffer."""
        if not self._sizes:
            return
        size, step = self._fill, self._chunk_size
        view = self._memory[:size]
        chunks = tuple(view[k:k + step] for k in range(0, size, step))
        meta = {"kind": BLOCK_KIND, "sizes": self._sizes}
        self._sizes, self._fill = [], 0
        if not self._reuse:
            self._memory = None  # the file may keep views of it
        self._add_section(chunks, meta, size)
        self.count += 1

    def close(self):
        """Give the block's memory back for the thread's next dump."""
        if self._reuse and self._memory is not None:
            _kept.block = self._memory
        self._memory = None


def block_offsets(sizes):
    """``(offsets, end)`` of buffers of ``sizes`` bytes laid out in a block,
    each at the next multiple of :data:`BUFFER_ALIGN`: where each starts,
    and the block's size (the last buffer's end)."""
    offsets, end = [], 0
    for n in sizes:
        at = _aligned(end)
        offsets.append(at)
        end = at + n
    return offsets, end


def block_sections(reader):
    """The buffer block sections of the dump ``reader`` reads, in order,
    with their buffers' offsets, each checked against its section:
    ``[(section, sizes, offsets), ...]``.

    Raises
    ------
    CorruptFileError
        If a block holds more than :data:`BLOCK_BYTES`, its sizes are not a
        list of sizes, or their layout does not fill its section exactly.
    """
    blocks = []
    for section in reader.sections:
        meta = section.meta
        if meta.get("kind") != BLOCK_KIND:
            continue
        if section.raw_size > BLOCK_BYTES:
            # Before anything is allocated for it: a block's memory is
            # backed before its chunks are read and checked.
            raise reader.error(f"section {section.index}: a buffer block of "
                               f"{section.raw_size} bytes, more than a block holds "
                               f"({BLOCK_BYTES})")
        sizes = meta.get("sizes")
        if (type(sizes) is not list or not sizes
                or not all(type(n) is int and 0 < n <= BLOCK_BYTES for n in sizes)):
            raise reader.error(f"section {section.index}: a buffer block with bad sizes")
        offsets, end = block_offsets(sizes)
        if end != section.raw_size:
            raise reader.error(f"section {section.index}: a buffer block of "
                               f"{section.raw_size} bytes whose {len(sizes)} buffers fill "
                               f"{end}")
        blocks.append((section, sizes, offsets))
    return blocks


def read_buffers(reader, verify=True, n_threads=1):
    """The buffers of the dump's blocks, in order, as writable memoryviews
    of memory new to this load (one ``np.empty`` per block, its pages
    backed in one call), or None for a dump without blocks. Each block is
    read whole and checked against its checksums as any section is; a
    buffer keeps its block alive."""
    blocks = block_sections(reader)
    if not blocks:
        return None
    buffers = []
    for section, sizes, offsets in blocks:
        memory = memoryview(np.empty(section.raw_size, np.uint8))
        backed = fault_in(memory)
        reader.read_into(section, memory, verify=verify, n_threads=n_threads, backed=backed)
        buffers += [memory[at:at + n] for at, n in zip(offsets, sizes)]
    return buffers


class StreamBuffers:
    """What the C unpickler's ``buffers=`` is given: ``buffers`` one after
    another, then a :class:`CorruptFileError` naming their count if the
    stream asks for more; :meth:`check_used` after the load refuses a
    stream that used fewer."""

    def __init__(self, buffers, name):
        self._count = len(buffers)
        self._left = iter(buffers)
        self._name = name
        self.given = itertools.chain(self._left, self._too_many())

    def _too_many(self):
        raise CorruptFileError(f"{self._name}: the pickle stream asks for more out-of-band "
                               f"buffers than the {self._count} its blocks hold")
        yield  # a generator: raised when the stream asks for one more

    def check_used(self):
        left = operator.length_hint(self._left)
        if left:
            raise CorruptFileError(f"{self._name}: the pickle stream uses "
                                   f"{self._count - left} of the {self._count} out-of-band "
                                   f"buffers its blocks hold")
