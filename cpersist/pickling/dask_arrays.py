"""dask arrays as sections, computed and written one band of blocks at a time.

A ``dask.array.Array`` met while pickling is stored as a section, as the
numpy array it computes to would be, in C order, with the same chunks:
the file loads it as that numpy array, and its bytes are those the numpy
array's dump would have. It is computed by dask's scheduler in force (the
threaded one, or the distributed ``Client`` in use) one *band* at a time: the
blocks that share a range of the first axis. A section's chunks are written
in order, so the band after the one being written is computed meanwhile,
and no other: at most two bands, and the chunks the writer has in flight,
are held in memory, whatever the size of the array. The band's bytes go to
the writer as views of the blocks where they are in C order, and as copies
of at most one chunk where they are not (a block in Fortran order, a band
of several blocks across the other axes).
"""

import contextvars
import sys
from collections import deque

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

    def chunks_to_write(self, step, compressed):
        """``(chunks, release)``: the array's C-order bytes in chunks of
        ``step`` bytes (the last one shorter), and a function the writer
        calls once per chunk when it is done with it (or None); for a
        ``compressed`` section, the chunks are not views of memory the
        source frees or reuses before the writer is done with them."""
        return self.byte_chunks(step, copies=compressed), None

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

    def chunks_to_write(self, step, compressed):
        """``(chunks, release)`` for the section writer: the array's C-order
        bytes as memoryviews of ``step`` bytes (the last one shorter),
        computed band by band, and the function the writer calls once per
        chunk when it is done with it.

        The chunks are views of the bands wherever they can be (compressed
        or not), so a band stays in memory until the writer is done with its
        last chunk: the band after the one being cut is started on once the
        bands before it are released, but for :data:`OLDER_BANDS_HELD`
        chunks' worth of them (small bands, the writer's window spanning
        several). At most two bands, and the writer's window, are held.
        """
        if not self.nbytes:
            return iter(()), None
        held = _HeldBands(OLDER_BANDS_HELD * step)
        return self._chunks(step, held), held.release

    def _chunks(self, step, held):
        cutter = Cutter(step)
        fed = yielded = 0
        with _Bands(self.array) as bands:
            while True:
                band = bands.take()
                if band is _END:
                    break
                nbytes = _band_nbytes(band)
                pieces = _band_bytes(band, self.dtype, step)
                band = None  # held by ``pieces`` until they are all fed
                for data in pieces:
                    fed += data.nbytes
                    for chunk in cutter.feed(data):
                        if not bands.started and held.room():
                            bands.start()
                        yielded += 1
                        yield chunk
                data = pieces = None
                held.cut(yielded, nbytes)
                if not bands.started and held.room():
                    bands.start()
            if fed != self.nbytes:
                raise DaskArrayError(
                    f"the dask array of shape {self.shape} and dtype {self.dtype} computed "
                    f"to {fed} bytes, not {self.nbytes}: its blocks are not the shapes its "
                    f"chunks say")
            yield from cutter.end()


class _HeldBands:
    """The bands cut whose chunks the writer may still hold (it says, in
    order, through :meth:`release`, which it is done with)."""

    __slots__ = ("_allowed", "_bands", "_bytes", "_released")

    def __init__(self, allowed):
        self._allowed = allowed
        self._bands = deque()  # (chunks yielded up to the band's end, its bytes)
        self._bytes = 0
        self._released = 0

    def release(self):
        self._released += 1

    def cut(self, yielded, nbytes):
        """A band is cut, its last chunk being the ``yielded``-th."""
        self._bands.append((yielded, nbytes))
        self._bytes += nbytes

    def room(self):
        """Whether another band may be computed: the bands the writer still
        holds chunks of add up to no more than the bytes allowed."""
        bands = self._bands
        while bands and bands[0][0] <= self._released:
            self._bytes -= bands.popleft()[1]
        return self._bytes <= self._allowed


#: Chunks' worth of older bands the writer may hold as the next is started on.
OLDER_BANDS_HELD = 4
_END = object()


class _Bands:
    """The bands of a dask array (the blocks that share a range of the first
    axis, as a nested list along axes 1 and on; a 0-d or 1-d array's band
    is one block), brought into this process one at a time, in order, on a
    thread of their own: :meth:`start` starts on the next, :meth:`take`
    waits for it (starting it if it was not).

    With a distributed client, the workers compute the next band as soon
    as they have sent the one before, and keep it until :meth:`start` asks
    for it: only its transfer waits for the writer.
    """

    def __init__(self, array):
        from concurrent.futures import ThreadPoolExecutor  # dask has imported it already

        blocks = array.to_delayed()
        if blocks.ndim == 0:
            blocks = blocks.reshape(1)
        self._rows = iter(blocks)
        self._client, self._options = _distributed()
        self._on_workers = self._fetching = None  # (futures, grid shape) of a band
        # The distributed client in use, and dask's settings, are context
        # variables of this thread: the computing thread runs in a copy of
        # its context.
        self._context = contextvars.copy_context()
        self._computing = ThreadPoolExecutor(1, thread_name_prefix="cpersist-dask")
        self._future = None
        self.started = False
        if self._client is not None:
            self._compute_on_workers()
        self.start()

    def _compute_on_workers(self):
        row = next(self._rows, _END)
        if row is not _END:
            if isinstance(row, np.ndarray):
                self._on_workers = self._client.compute(row.ravel().tolist()), row.shape
            else:
                self._on_workers = self._client.compute([row]), None

    def start(self):
        """Start on the next band (if there is one)."""
        if self.started:
            return
        self.started = True
        if self._client is None:
            row = next(self._rows, _END)
            if row is not _END:
                self._future = self._computing.submit(
                    self._context.copy().run, self._compute, row)
            return
        self._fetching, self._on_workers = self._on_workers, None
        if self._fetching is not None:
            self._future = self._computing.submit(self._fetch)

    def take(self):
        """The next band, or ``_END``."""
        self.start()
        future, self._future = self._future, None
        self.started = False
        return _END if future is None else future.result()

    def _compute(self, row):
        import dask

        if not isinstance(row, np.ndarray):  # the one block of a band of a 1-d array
            return dask.compute(row, **self._options)[0]
        return _grid(dask.compute(*row.ravel().tolist(), **self._options), row.shape)

    def _fetch(self):
        (futures, shape), self._fetching = self._fetching, None
        blocks = self._client.gather(futures, **self._options)
        # The workers forget this band (this held its last futures) before
        # they compute the next: their memory limits are counted for one.
        del futures
        self._compute_on_workers()
        return blocks[0] if shape is None else _grid(blocks, shape)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._future is not None:
            self._future.cancel()
        self._computing.shutdown(wait=True)
        self._on_workers = self._fetching = None


def _grid(flat, shape):
    grid = np.empty(len(flat), dtype=object)
    grid[:] = flat
    return _nested(grid.reshape(shape).tolist())


def _distributed():
    """``(client, options)``: the distributed ``Client`` dask computes with
    here (None if the scheduler in force is another), and the options to
    gather with. A client whose scheduler runs in this process (a
    ``LocalCluster``'s) gathers the blocks straight from the workers:
    through the scheduler, as a client gathers by default, each band would
    be received twice in this process -- by the scheduler, then from it by
    the client -- while the band before it is being written. A scheduler
    elsewhere holds its copy in its own process, and may be the only one
    the client can reach: it is left alone."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return None, {}
    import dask.base

    client = getattr(dask.base.get_scheduler(), "__self__", None)
    if not isinstance(client, distributed.Client):
        return None, {}
    address = client.scheduler.address
    if any(s.address == address for s in list(distributed.Scheduler._instances)):
        return client, {"direct": True}
    return client, {}


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
