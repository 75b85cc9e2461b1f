"""LazyArray: an array stored in a cpersist file, read a slice at a time.

Indexing one reads only the chunks holding the elements the index selects
(:mod:`.plan` resolves the index and finds the elements' geometry in the
stored bytes; :mod:`.fetch` fetches and decodes the chunks), on the thread pool:
a slice whose elements are one contiguous run of the stored bytes is decoded
straight into the result, chunk by chunk; any other is cut into groups of
selected elements starting in the same chunk, each group's chunks decoded
into a buffer and its elements copied out. Chunks are found from their raw
lengths (:attr:`cpersist.container.index.Section.chunks`), so this works on every
file, and cheaply on those whose chunks hold whole rows.
"""

import itertools
import json
import math

import numpy as np

from .._runtime.parallel import run_claimed
from ..container import checksum
from ..exceptions import FileChangedError
from ..pickling.arrays import parse_description
from .block_memory import BLOCK_MEMORY
from .fetch import _ChunkParts
from .openfile import shared_file
from .plan import _c_strides, _contiguous_span, _groups, merged_blocks, select


def section_fingerprint(section):
    """A checksum of everything the index says of ``section``.

    Chunk offsets, lengths and checksums of their bytes are in it, so a file
    rewritten with other data, or the same data elsewhere, gives another.
    """
    codec = None if section.codec is None else section.codec.get_config()
    text = json.dumps([section.index, codec, section.meta, [list(c) for c in section.chunks]],
                      sort_keys=True, separators=(",", ":"))
    return checksum(text.encode())


class BoundSection:
    """A section as one reader of the file describes it, with where each
    chunk's decoded bytes start (computed on first use)."""

    __slots__ = ("reader", "section", "_starts")

    def __init__(self, reader, section):
        self.reader = reader
        self.section = section
        self._starts = None

    @property
    def starts(self):
        if self._starts is None:
            lengths = [c.raw_length for c in self.section.chunks]
            self._starts = np.array([0, *itertools.accumulate(lengths)], dtype=np.int64)
        return self._starts


class LazyArray:
    """An array in a cpersist file, read only where it is indexed.

    Made by :func:`cpersist.open` (``handle.arrays`` and
    ``handle.load(lazy=True)``), never directly. Indexing with numpy basic
    indexing (integers, slices of any step, ``...``, ``None``) returns what
    the same index gives on the array in memory, reading and decoding only
    the chunks that hold the selected elements. ``numpy.asarray(lazy)`` or
    :meth:`read` reads all of it, into a new array (so ``numpy.array(lazy,
    copy=False)`` raises ValueError, as for zarr and h5py arrays).

    A LazyArray stays usable after its handle is closed when the file was
    opened from a path (it reopens the file), and pickles as a reference to
    the file (its path, the array's section and a fingerprint of that
    section), so that another process reads it from the file itself. If the
    file has meanwhile been replaced by one not holding the same data,
    reading raises :class:`~cpersist.FileChangedError`.

    Attributes
    ----------
    path : str
        Where the array sits in the object, as ``cpersist info`` prints it
        (``obj['w']``).
    shape : tuple of int
    dtype : numpy.dtype
    ndim, size, nbytes : int
    chunks : tuple of tuple of int
        Block lengths per axis, dask-style, aligned with the stored chunks
        along the array's slowest axis (the first in C order, the last in
        Fortran order); whole along the others.
    """

    # Slots: a file of many arrays lists thousands of them.
    __slots__ = ("_file", "_index", "path", "_meta", "dtype", "shape", "_order", "nbytes",
                 "_rows_per_chunk", "_bound", "_fingerprint", "_verify", "_n_threads",
                 "__weakref__")

    def __init__(self, file, index, path, meta, bound=None, fingerprint=None,
                 verify=True, n_threads=1, layout=None):
        self._file = file
        self._index = index
        self.path = path
        self._meta = meta
        self.dtype, self.shape, self._order, self.nbytes = layout or parse_description(meta)
        rows = meta.get("rows_per_chunk")
        self._rows_per_chunk = rows if type(rows) is int and rows > 0 else None
        self._bound = bound
        self._fingerprint = fingerprint
        self._verify = verify
        self._n_threads = n_threads

    # -- description ---------------------------------------------------------

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)

    @property
    def itemsize(self):
        return self.dtype.itemsize

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __repr__(self):
        codec = self._codec_id()
        return (f"<LazyArray {self.path} {self.dtype} {self.shape} "
                f"{codec or 'raw'} in {self._file.name}>")

    def _codec_id(self):
        bound = self._bound
        if bound is None or bound.section.codec is None:
            return None
        return bound.section.codec.codec_id

    @property
    def chunks(self):
        if not self.shape:
            return ()
        slow = self.ndim - 1 if self._order == "F" else 0
        n = self.shape[slow]
        if self.size == 0 or self.itemsize == 0:
            blocks = (n,)
        elif self._rows_per_chunk is not None:
            rows = self._rows_per_chunk
            blocks = (rows,) * (n // rows) + ((n % rows,) if n % rows else ())
        else:
            row_bytes = self.nbytes // n
            starts = self._bind().starts
            edges = sorted({min(n, int(s) // row_bytes) for s in starts[:-1]} | {n})
            blocks = tuple(b - a for a, b in zip(edges, edges[1:]))
        return tuple(blocks if axis == slow else (length,)
                     for axis, length in enumerate(self.shape))

    @property
    def fingerprint(self):
        """Checksum of the array's section as the index describes it."""
        if self._fingerprint is None:
            self._fingerprint = section_fingerprint(self._bind().section)
        return self._fingerprint

    # -- the file ------------------------------------------------------------

    def _bind(self):
        """The section in the file's current reader, checked to be the same."""
        bound = self._bound
        reader = self._file.reader()
        # Opening the file walked none of its record headers (a listing needs
        # the index alone): they are refused, if damaged, before any data.
        reader.check_records()
        if bound is not None and bound.reader is reader:
            return bound
        if bound is not None and self._fingerprint is None:
            self._fingerprint = section_fingerprint(bound.section)
        sections = reader.sections
        section = (sections[self._index]
                   if 0 <= self._index < len(sections) and self._index != reader.root else None)
        if section is None or (self._file.fingerprint(reader, section, section_fingerprint)
                               != self._fingerprint):
            raise FileChangedError(
                f"{self._file.name} has changed since the array {self.path} was opened: "
                f"its section {self._index} no longer holds the same data; open the "
                f"file again")
        bound = self._bound = BoundSection(reader, section)
        return bound

    def __reduce__(self):
        reference = self._file.reference
        if reference is None:
            raise TypeError(
                f"cannot pickle the LazyArray {self.path} of {self._file.name}: it was "
                f"read from a stream, which another process cannot reopen; open the file "
                f"by path, or read the array first")
        return _rebuild, (reference, self._index, self.path, self._meta, self.fingerprint,
                          self._verify, self._n_threads)

    def __dask_tokenize__(self):
        reference = self._file.reference
        where = reference.key if reference is not None else id(self._file)
        return ("cpersist.LazyArray", where, self._index, self.fingerprint)

    # -- reading -------------------------------------------------------------

    def read(self):
        """The whole array, as a new ndarray."""
        bound = self._bind() if self.nbytes else None
        if bound is not None:
            # The chunks' own headers against the index, before allocating.
            bound.reader.check_claimed_sizes(bound.section)
        try:
            out = np.empty(self.shape, dtype=self.dtype, order=self._order)
        except MemoryError:
            raise bound.reader.error(
                f"section {self._index} claims an array {self.dtype} {self.shape} that "
                f"cannot be allocated (MemoryError)") from None
        if bound is not None:
            view = (out.T if self._order == "F" else out).reshape(-1).view(np.uint8)
            bound.reader.read_into(bound.section, view, verify=self._verify,
                                   n_threads=self._n_threads)
        return out

    def __array__(self, dtype=None, copy=None):
        # numpy 2's copy=False asks for no copy, which reading cannot give.
        if copy is False:
            raise ValueError(
                f"the LazyArray {self.path} cannot become an ndarray without a copy "
                f"(copy=False): it is read from the file; use numpy.asarray(lazy) or "
                f"lazy.read()")
        arr = self.read()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def to_dask(self, chunks=None):
        """This array as a :class:`dask.array.Array`.

        Needs dask (the ``dask`` extra: ``pip install '.[dask]'``). Each
        block is read by indexing this array, into memory that blocks
        already dropped used (up to 256 MiB of it is kept per process for
        that); on a distributed cluster each worker reopens the file from
        the pickled reference.

        Parameters
        ----------
        chunks : optional
            Any ``chunks`` :func:`dask.array.from_array` takes. By default,
            blocks of whole stored chunks (:attr:`chunks`) along the slowest
            axis, each about a sixteenth of the array but at most dask's
            ``array.chunk-size``: enough blocks to keep a cluster's workers
            busy, and few enough that dask's cost per task stays small
            beside reading one.
        """
        import dask
        import dask.array as da
        from dask.utils import parse_bytes

        if chunks is None:
            limit = min(parse_bytes(dask.config.get("array.chunk-size")), self.nbytes // 16)
            chunks = merged_blocks(self.chunks, self.shape, self.nbytes, limit)
        return da.from_array(self, chunks=chunks, asarray=False, fancy=False,
                             getitem=_read_block,
                             meta=np.empty((0,) * self.ndim, dtype=self.dtype))

    def __getitem__(self, index):
        return self._getitem(index, np.empty)

    def _getitem(self, index, empty):
        """``self[index]``, its result made by ``empty(shape, dtype)``."""
        sel = select(index, self.shape)
        axes, shape = sel.axes, self.shape
        if self._order == "F":
            axes, shape = axes[::-1], shape[::-1]
        counts = tuple(count for _, _, count in axes)
        if (counts == shape and self.size and self.itemsize
                and all(step == 1 or n <= 1 for (_, step, _), n in zip(axes, shape))):
            return _finish(self.read(), sel)
        out = empty(counts, self.dtype)
        if out.size and self.itemsize:
            bound = self._bind()
            strides = _c_strides(shape, self.itemsize)
            span = _contiguous_span(axes, shape, strides, self.itemsize)
            if span is not None:
                self._read_span(bound, span, memoryview(out.reshape(-1).view(np.uint8)))
            else:
                self._read_groups(bound, axes, strides, out)
        if self._order == "F":
            out = out.T
        return _finish(out, sel)

    def _read_span(self, bound, span, out):
        """Fill ``out`` with the stored bytes ``span[0]:span[1]``."""
        lo, hi = span
        starts = bound.starts
        first = int(np.searchsorted(starts, lo, "right")) - 1
        last = int(np.searchsorted(starts, hi - 1, "right")) - 1
        parts = _ChunkParts(bound, self._verify, {
            i: (max(lo, int(starts[i])), min(hi, int(starts[i + 1])))
            for i in range(first, last + 1)})

        def task(claims):
            held = parts.buffers()
            try:
                for k in claims:
                    a, b = parts.spans[first + k]
                    parts.read(first + k, a, b, out[a - lo:b - lo], held)
            finally:
                parts.give_back(held)

        run_claimed(task, last - first + 1, parts.threads(self._n_threads), helping=True)

    def _read_groups(self, bound, axes, strides, out):
        """Fill ``out`` with the elements ``axes`` select, group by group."""
        starts = bound.starts
        groups = _groups(axes, strides, self.itemsize, starts,
                         max(c.raw_length for c in bound.section.chunks))
        split = groups.split
        inner_counts = tuple(count for _, _, count in axes[split + 1:])
        dest = out.reshape((-1,) + inner_counts)
        group_strides = tuple(step * strides[k] for k, (_, step, _) in enumerate(axes))[split:]
        spans = {}
        for *_, lo, hi, c0, c1 in groups.items:
            for i in range(c0, c1 + 1):
                a, b = max(lo, int(starts[i])), min(hi, int(starts[i + 1]))
                if i in spans:  # read by several groups: fetched once for all
                    a, b = min(a, spans[i][0]), max(b, spans[i][1])
                spans[i] = a, b
        parts = _ChunkParts(bound, self._verify, spans)

        def task(claims):
            held = parts.buffers()
            scratch = bytearray(0)
            try:
                for g in claims:
                    position, count, first_byte, lo, hi, c0, c1 = groups.items[g]
                    if len(scratch) < hi - lo:
                        scratch = bytearray(hi - lo)
                    view = memoryview(scratch)
                    for i in range(c0, c1 + 1):
                        a, b = max(lo, int(starts[i])), min(hi, int(starts[i + 1]))
                        parts.read(i, a, b, view[a - lo:b - lo], held)
                    selected = np.ndarray((count,) + inner_counts, dtype=self.dtype,
                                          buffer=scratch, offset=first_byte - lo,
                                          strides=group_strides)
                    dest[position:position + count] = selected
            finally:
                parts.give_back(held)

        run_claimed(task, len(groups.items), parts.threads(self._n_threads), helping=True)


def _read_block(lazy, index):
    """dask's ``getitem`` for :meth:`LazyArray.to_dask`: the block in
    memory that blocks already dropped used (:mod:`cpersist.lazy.block_memory`)."""
    return lazy._getitem(index, BLOCK_MEMORY.empty)


def _rebuild(reference, index, path, meta, fingerprint, verify, n_threads):
    return LazyArray(shared_file(reference), index, path, meta, fingerprint=fingerprint,
                     verify=verify, n_threads=n_threads)


def _finish(arr, sel):
    # The Ellipsis keeps a 0-d result an array; numpy's rule for scalars is
    # applied after.
    result = arr[sel.result_index + (Ellipsis,)]
    return result[()] if sel.scalar else result


