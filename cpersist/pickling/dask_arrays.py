"""dask arrays as sections, computed and written one band of blocks at a time.

A ``dask.array.Array`` met while pickling is stored as a section, as the
numpy array it computes to would be, in C order, with the same chunks:
the file loads it as that numpy array, and its bytes are those the numpy
array's dump would have. It is computed by dask's scheduler in force (the
threaded one, or the distributed ``Client`` in use) one *band* at a time: the
blocks that share a range of the first axis. A section's chunks are written
in order, so the band after the one being written is computed meanwhile,
and no other: at most two bands are held in memory, whatever the size of the
array. The band's bytes go to the writer as views of the blocks where they
are in C order, and as copies of at most one chunk where they are not (a
block in Fortran order, a band of several blocks across the other axes).
"""

import contextvars
import sys

import numpy as np

from ..exceptions import DaskArrayError
from .arrays import describe_layout, iter_c_order, rows_in_step


def dask_array_type():
    """``dask.array.Array`` once ``dask.array`` is imported, else None
    (nothing of dask is imported here: an object holds no dask array before
    it is)."""
    module = sys.modules.get("dask.array")
    return getattr(module, "Array", None)


class StreamedSource:
    """An array to store as a C-ordered section whose bytes are made while
    the section is written (what ``store`` is handed in its place): see
    :class:`DaskSource` and :class:`.row_batches.BatchSource`.

    Attributes
    ----------
    dtype : numpy.dtype
    shape : tuple of int
    nbytes : int
    """

    __slots__ = ("dtype", "shape", "nbytes")

    def __init__(self, dtype, shape):
        self.dtype = dtype
        self.shape = tuple(int(n) for n in shape)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def describe(self):
        """The section's ``meta``, as :func:`.arrays.describe` gives it for
        the whole array."""
        return describe_layout(self.dtype, self.shape, "C")

    def step(self, chunk_size):
        """``(rows per chunk or None, bytes per chunk)``, as
        :func:`.arrays.iter_chunks` cuts the whole array."""
        itemsize = self.dtype.itemsize
        step = max(1, chunk_size // itemsize) * itemsize if itemsize else chunk_size
        if not self.shape or not self.nbytes:
            return None, step
        rows = rows_in_step(self.nbytes, self.shape[0], step)
        if rows is not None:
            step = rows * (self.nbytes // self.shape[0])
        return rows, step


class DaskSource(StreamedSource):
    """A dask array to store as a C-ordered section.

    Attributes
    ----------
    array : dask.array.Array
    """

    __slots__ = ("array",)

    def __init__(self, array):
        shape = array.shape
        if any(n != n for n in shape):  # NaN: a size dask does not know yet
            raise DaskArrayError(
                f"cannot store a dask array of unknown shape {shape}: its chunk sizes "
                f"are unknown (after a boolean mask, say); call x.compute_chunk_sizes() "
                f"first")
        super().__init__(array.dtype, shape)
        self.array = array

    def materialize(self):
        """The whole array, in C order (for one small enough to stay in the
        pickle stream)."""
        return np.asarray(self.array.compute(), order="C")

    def byte_chunks(self, step, copies=False):
        """Yield the array's C-order bytes as memoryviews of ``step`` bytes
        (the last one shorter), computing it band by band.

        With ``copies``, every chunk is a copy, never a view of a band: for
        a writer that keeps chunks a while after it is given them (those
        being compressed on the pool), which would keep their band in memory
        while the next two are computed. A copy costs little beside
        compressing it.
        """
        if not self.nbytes:
            return
        cutter = Cutter(step, copies)
        fed = 0
        for band in _computed_bands(self.array):
            pieces = _band_bytes(band, self.dtype, step)
            band = None  # held by ``pieces`` until they are all fed
            data = next(pieces, None)
            if data is None:  # a band of no rows
                continue
            for following in pieces:
                fed += data.nbytes
                yield from cutter.feed(data)
                data = following
            # The band's last chunk is copied: the writer holds the chunk it
            # was last given while it asks for the next, which would keep
            # the whole band in memory while the next two are computed.
            fed += data.nbytes
            yield from cutter.feed(data, copy_tail=True)
            pieces = data = following = None
        if fed != self.nbytes:
            raise DaskArrayError(
                f"the dask array of shape {self.shape} and dtype {self.dtype} computed to "
                f"{fed} bytes, not {self.nbytes}: its blocks are not the shapes its "
                f"chunks say")
        yield from cutter.end()


def _computed_bands(array):
    """Yield each band of ``array`` as a nested list of its blocks (axes 1
    and on; a 0-d or 1-d array's band is one block), in order, computing the
    next band while the caller uses one."""
    from concurrent.futures import ThreadPoolExecutor  # dask has imported it already

    import dask

    blocks = array.to_delayed()
    if blocks.ndim == 0:
        blocks = blocks.reshape(1)

    options = _gather_options()

    def compute(row):
        if not isinstance(row, np.ndarray):  # the one block of a band of a 1-d array
            return dask.compute(row, **options)[0]
        flat = dask.compute(*row.ravel().tolist(), **options)
        grid = np.empty(len(flat), dtype=object)
        grid[:] = flat
        return _nested(grid.reshape(row.shape).tolist())

    # The distributed client in use, and dask's settings, are context
    # variables of this thread: the computing thread runs in a copy of its
    # context.
    context = contextvars.copy_context()
    rows = iter(blocks)
    with ThreadPoolExecutor(1, thread_name_prefix="cpersist-dask") as computing:
        future = computing.submit(context.copy().run, compute, next(rows))
        try:
            for row in rows:
                band = future.result()
                # The next band is computed while this one is written; it is
                # asked for once this one is done, and not before: at most
                # two are held.
                future = computing.submit(context.copy().run, compute, row)
                yield band
                band = None
            yield future.result()
        finally:
            future.cancel()


def _gather_options():
    """Options for ``dask.compute``: a distributed client whose scheduler
    runs in this process (a ``LocalCluster``'s) gathers the blocks straight
    from the workers. Through the scheduler, as a client gathers by
    default, each band would be received twice in this process -- by the
    scheduler, then from it by the client -- while the band before it is
    being written. A scheduler elsewhere holds its copy in its own process,
    and may be the only one the client can reach: it is left alone."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return {}
    import dask.base

    client = getattr(dask.base.get_scheduler(), "__self__", None)
    if not isinstance(client, distributed.Client):
        return {}
    address = client.scheduler.address
    if any(s.address == address for s in list(distributed.Scheduler._instances)):
        return {"direct": True}
    return {}


def _nested(blocks):
    """A band's blocks as :func:`numpy.block` takes them, or its only block."""
    while type(blocks) is list and len(blocks) == 1:
        blocks = blocks[0]
    return blocks


def _block(block, dtype):
    block = np.asarray(block)
    if block.dtype != dtype:
        raise DaskArrayError(
            f"a block of the dask array computed to an array of {block.dtype}, not of "
            f"{dtype} as the dask array says (give map_blocks its dtype=)")
    return block


def _band_bytes(band, dtype, step):
    """The C-order bytes of a band (one block, or a nested list of blocks
    along axes 1 and on), as views where they are C-contiguous already,
    else as C-order copies of about ``step`` bytes at a time."""
    if type(band) is not list:
        block = _block(band, dtype)
        if block.flags.c_contiguous and block.ndim:
            # One view of it all: the chunks inside it are views too, where
            # pieces of ``step`` bytes would each straddle two chunks.
            yield block.reshape(-1).view(np.uint8)
        else:
            yield from iter_c_order(block, step)
        return
    first = band
    while type(first) is list:
        first = first[0]
    first = _block(first, dtype)
    n_rows = len(first)
    row_bytes = max(1, _band_nbytes(band) // max(n_rows, 1))
    rows = max(1, step // row_bytes)
    for start in range(0, n_rows, rows):
        yield from iter_c_order(np.block(_sliced(band, dtype, start, start + rows)), step)


def _band_nbytes(band):
    if type(band) is list:
        return sum(_band_nbytes(part) for part in band)
    return np.asarray(band).nbytes


def _sliced(band, dtype, start, stop):
    if type(band) is list:
        return [_sliced(part, dtype, start, stop) for part in band]
    return _block(band, dtype)[start:stop]


class Cutter:
    """Cuts a stream of byte views into chunks of ``step`` bytes: views of
    the data fed where a chunk lies within one piece of it (copies if
    ``copies``), copies where a chunk spans two pieces."""

    __slots__ = ("_step", "_copies", "_buffer", "_fill")

    def __init__(self, step, copies=False):
        self._step = step
        self._copies = copies
        self._buffer = None
        self._fill = 0

    def feed(self, data, copy_tail=False):
        """Yield the chunks ``data`` completes; with ``copy_tail``, its
        last bytes are copied rather than yielded as a view, so that nothing
        yielded holds ``data``'s memory once the next piece is fed."""
        step = self._step
        data = memoryview(data).cast("B")
        n = len(data)
        pos = 0
        if self._fill:
            take = min(step - self._fill, n)
            self._buffer[self._fill:self._fill + take] = data[:take]
            self._fill += take
            pos = take
            if self._fill == step:
                yield memoryview(self._buffer)
                self._buffer, self._fill = None, 0
        copies = self._copies
        while n - pos > step or (n - pos == step and not copy_tail):
            yield memoryview(bytearray(data[pos:pos + step])) if copies else data[pos:pos + step]
            pos += step
        if pos < n:
            # A new buffer each time: the chunk yielded before may still be
            # waiting to be encoded.
            self._buffer = bytearray(step)
            self._buffer[:n - pos] = data[pos:]
            self._fill = n - pos

    def end(self):
        if self._fill:
            yield memoryview(self._buffer)[:self._fill]
            self._buffer, self._fill = None, 0
