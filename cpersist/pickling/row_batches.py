"""Arrays given as an iterable of row batches, written one batch at a time.

:class:`RowBatches` stands, inside an object to dump, for the array its
batches concatenate to along the first axis. Its shape and dtype are given
up front, as a dataset's are to h5py: the pickle stream names the array
before any batch is read, a raw section reserves its bytes at once, and a
batch of another shape or dtype, or too many or too few rows, is an error
rather than a file that says one thing and holds another. The batches are
read from the iterable as the section's chunks are written; the batch being
written is the only one held, besides the chunks being compressed.
"""

import numpy as np

from ..exceptions import RowBatchesError
from .arrays import iter_c_order
from .dask_arrays import Cutter, StreamedSource


class RowBatches:
    """The array that ``batches`` concatenate to along the first axis,
    written block by block when the object holding it is dumped.

    Place it inside the object given to :func:`cpersist.dump` where the
    array should be; the file then holds that array as if it had been a
    numpy array (in C order), and :func:`cpersist.load` gives a numpy array.
    The batches are read one at a time while the array's section is
    written, so an array larger than memory can be dumped from a
    generator.

    Parameters
    ----------
    batches : iterable of array_like
        Arrays of ``shape[1:]`` rows (or, for a 1-d array, 1-d arrays) of
        ``dtype``, in order. Read once: a second dump of the same
        ``RowBatches`` raises.
    shape : tuple of int
        The whole array's shape; its first axis is the sum of the batches'
        lengths.
    dtype : numpy.dtype or str
        The array's dtype, which every batch must have (no casts).

    Raises
    ------
    RowBatchesError
        At dump time, if a batch has another dtype or row shape, the batches
        hold more or fewer rows than ``shape[0]``, or the batches were read
        by an earlier dump (or by ``compress="max"``, which writes an object
        of at most 16 MiB several ways). Nothing is left at the dump's path.

    Examples
    --------
    >>> import numpy as np, cpersist
    >>> def batches():
    ...     for i in range(4):
    ...         yield np.full((2_500, 8), i, dtype=np.float32)
    >>> x = cpersist.RowBatches(batches(), shape=(10_000, 8), dtype=np.float32)
    >>> cpersist.dump({"x": x}, "rows.cp", compress=3)
    ['rows.cp']
    >>> cpersist.load("rows.cp")["x"][::2_500, 0]
    array([0., 1., 2., 3.], dtype=float32)
    """

    __slots__ = ("_batches", "shape", "dtype", "_used")

    def __init__(self, batches, shape, dtype):
        if isinstance(shape, (int, np.integer)):
            shape = (shape,)
        shape = tuple(int(n) for n in shape)
        if not shape or any(n < 0 for n in shape):
            raise RowBatchesError(
                f"RowBatches needs the shape of an array of one axis or more, of sizes 0 "
                f"or more, not {shape}")
        dtype = np.dtype(dtype)
        if dtype.hasobject:
            raise RowBatchesError(
                f"RowBatches stores arrays of plain data, not of dtype {dtype} (which holds "
                f"Python objects)")
        self._batches = batches
        self.shape = shape
        self.dtype = dtype
        self._used = False

    def __repr__(self):
        return f"RowBatches(shape={self.shape}, dtype={self.dtype})"

    def __reduce__(self):
        raise TypeError(
            "a RowBatches is written by cpersist.dump, which reads its batches; other "
            "picklers cannot store it")

    def _take(self):
        """The batches, once: an iterable read twice would be read empty
        (a generator) and store zeros where the data should be."""
        if self._used:
            raise RowBatchesError(
                f"this RowBatches (shape {self.shape}) was read already, by an earlier dump "
                f"(make a new one for each dump) or by compress='max', which writes an "
                f"object of at most 16 MiB several ways (use another compress level)")
        self._used = True
        return self._batches


class BatchSource(StreamedSource):
    """A :class:`RowBatches` as the section writer takes it."""

    __slots__ = ("batches",)

    def __init__(self, batches):
        super().__init__(batches.dtype, batches.shape)
        self.batches = batches

    def materialize(self):
        """The whole array (for one small enough to stay in the pickle stream)."""
        out = np.empty(self.shape, self.dtype)
        pos = 0
        for batch in self._checked():
            out[pos:pos + len(batch)] = batch
            pos += len(batch)
        return out

    def byte_chunks(self, step, copies=False):
        """Yield the array's C-order bytes in chunks of ``step`` bytes (the
        last one shorter), reading one batch at a time. With ``copies``,
        every chunk is a copy, never a view of a batch: for a writer that
        keeps chunks a while after it is given them (those being compressed
        on the pool), which would keep their batch in memory while the next
        ones are read."""
        cutter = Cutter(step, copies)
        for batch in self._checked():
            if not batch.nbytes:
                continue
            pieces = iter_c_order(batch, step)
            batch = None
            data = next(pieces)
            for following in pieces:
                yield from cutter.feed(data)
                data = following
            # Copied, as a band's last chunk is: nothing yielded keeps this
            # batch in memory while the next one is made.
            yield from cutter.feed(data, copy_tail=True)
            pieces = data = following = None
        yield from cutter.end()

    def _checked(self):
        rows = 0
        shape, dtype = self.shape, self.dtype
        for batch in self.batches._take():
            batch = np.asarray(batch)
            if batch.dtype != dtype:
                raise RowBatchesError(
                    f"a batch of the RowBatches of shape {shape} is of dtype {batch.dtype}, "
                    f"not {dtype}")
            if batch.ndim != len(shape) or batch.shape[1:] != shape[1:]:
                raise RowBatchesError(
                    f"a batch of the RowBatches of shape {shape} has shape {batch.shape}: "
                    f"batches are arrays of rows of shape {shape[1:]}")
            rows += len(batch)
            if rows > shape[0]:
                raise RowBatchesError(
                    f"the batches of the RowBatches of shape {shape} hold more than "
                    f"{shape[0]} rows")
            yield batch
        if rows != shape[0]:
            raise RowBatchesError(
                f"the batches of the RowBatches of shape {shape} hold {rows} rows, not "
                f"{shape[0]}")
