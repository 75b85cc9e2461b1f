"""A snapshot of an object graph, taken on the calling thread so that a
background dump writes the object as it was at the call.

:func:`take` pickles the graph with :class:`~.snapshot_pickler.SnapshotPickler`: everything but
arrays goes into an in-memory pickle stream (so non-array state is captured
by value), and each array is set aside instead of being serialized:

* a numpy array of plain data (and a ``np.memmap``, stored as a plain array
  as a dump stores it): its bytes copied once into a new array of the same
  order (C or F; a non-contiguous one as C, the order a dump stores it in),
  in memory of the previous snapshot where there is some (:class:`~.snapshot_pickler.Buffers`);
* a CPU ``torch.Tensor`` or ``nn.Parameter`` that cpersist stores as a
  section: its storage copied once, however many tensors view it, so that
  views and tied weights still share memory in the snapshot;
* a ``jax.Array`` on the CPU: the data of its buffers copied as a numpy
  array's (one per distinct shard), so that a jitted step donating the
  array right after the call can write its result into the array's own
  memory (:class:`~.snapshot_pickler._JaxHostData`).

Anything else (object arrays, masked arrays, other tensors) keeps its own
pickling, which copies its data into the stream. :meth:`Snapshot.restore`
unpickles the stream on the writing thread, handing back the set-aside
arrays, into an object graph equal to the original at the call and sharing
no mutable memory with it.

With ``deferred=True``, the copies of arrays and storages of at least
:data:`~.snapshot_pickler.DEFER_FROM` bytes are left to :meth:`Snapshot.copy` (their memory
taken at once): the caller starts the dump of the restored graph on another
thread first, and the two meet in the middle. The dump writes the arrays
from the first on, straight from the originals' memory where the call has
not got to them yet; the call copies them from the last one back, a block
at a time, until it reaches what the dump took. It then waits until the dump
is done with every chunk it took from an original, and returns: nothing of
the originals is read after that, so the caller may change them. So the
call copies only what the dump has not written by then, and the dump never
waits for a copy but where the two meet. The writing thread gets each
array's chunks from :func:`chunks_to_write` (``write_sections`` does, for
each section).

The call paces its copies (:mod:`.copy_pace`): it leaves to the dump
what the dump can write before the call would have copied it all.
"""

import io
import threading

import numpy as np

from .arrays import byte_view, iter_chunks
from .copy_pace import MEASURED_COPY, CopyPace, measure_copy, speed_unknown
from .snapshot_pickler import SnapshotPickler, SnapshotUnpickler, kept_in
from .snapshot_reads import DumpReads, IncompleteSnapshot  # noqa: F401


#: Bytes :meth:`Snapshot.copy` claims and copies at a time: where the call
#: and the dump meet, the dump waits for at most one of them.
COPY_BLOCK = 4 << 20

#: The deferred snapshot that the current thread's dump is writing.
_dumping = threading.local()


def chunks_to_write(arr, chunk_size):
    """``(chunks, release)``: ``arr``'s bytes as
    :func:`~cpersist.pickling.arrays.iter_chunks` cuts them, and what the
    writer calls once per chunk, in order, when it no longer reads it (see
    ``ContainerWriter.add_section``), or None.

    Outside the dump of a deferred snapshot (see
    :meth:`Snapshot.written_by_this_thread`), or for an array none of its
    copies holds, the array's own chunks and None. Else see
    :meth:`Snapshot.chunks`.
    """
    snapshot = getattr(_dumping, "snapshot", None)
    if snapshot is None:
        itemsize = arr.dtype.itemsize
        if (0 < arr.nbytes <= max(1, chunk_size // max(itemsize, 1)) * itemsize
                and (arr.flags.c_contiguous or arr.flags.f_contiguous)):
            # The one chunk iter_chunks would cut, without a generator's layers.
            return (memoryview(byte_view(arr)),), None
        return iter_chunks(arr, chunk_size), None
    return snapshot.chunks(arr, chunk_size)


class Snapshot(DumpReads):
    """An object graph as :func:`take` captured it."""

    def __init__(self, stream, kept, pins, buffers, deferred=()):
        self._stream = stream
        self._kept = kept
        self._pins = pins  # alive as long as the snapshot, after restore()
        self._buffers = buffers
        #: Bytes of the arrays set aside: the copies' and the JAX arrays' held.
        self.nbytes = (sum(buffer.nbytes for buffer in buffers)
                       + sum(view.nbytes for views in pins for view in views))
        # The deferred copies (snapshot_pickler.Deferred), in the order the dump meets them.
        self._deferred = list(deferred)
        self._by_address = sorted(self._deferred, key=lambda item: item.start)
        self._starts = [item.start for item in self._by_address]
        self._state = threading.Condition()
        # Under _state:
        self._reading = 0  # chunks the dump is reading from originals
        self._finished = not self._deferred  # copy() has returned or raised
        self._broken = False  # copy() raised: the originals may have changed
        self._dump_ended = False
        self._left = sum(item.size for item in self._deferred)  # neither taken nor claimed
        self._pace = CopyPace(self._left)
        self._dump_waits = False  # for the call to copy
        #: Bytes the dump has read from originals rather than from copies.
        self.from_originals = 0
        #: Whether the dump puts what it reads from the originals into the
        #: copies and writes it from there (see :meth:`kept_memory`).
        self.fill_taken = False

    def copy(self):
        """Make the deferred copies, from the last back to what the dump has
        taken from the originals, then wait until the dump no longer reads
        any original (on the thread that took the snapshot, before it
        returns to its caller). If it stops early, the dump raises
        :class:`IncompleteSnapshot` on the first chunk it cannot have."""
        state = self._state
        complete = False
        self._pace.start()
        # Those the dump cannot read from the original first: it waits for them.
        ordered = ([item for item in reversed(self._deferred) if item.original is None]
                   + [item for item in reversed(self._deferred) if item.original is not None])
        try:
            for item in ordered:
                if not self._copy_down(item):
                    break  # the dump is over: nothing more to copy
            with state:
                while self._reading and not self._dump_ended:
                    state.wait()
                complete = True
                self._finish()
        finally:
            if not complete:
                with state:
                    self._broken = True
                    self._finish()

    def _finish(self):
        self._finished = True
        # Neither the originals nor these views of the copies are needed any
        # more (the dump reads the restored arrays): the copies' memory can
        # be reused once the dump is done (see Buffers.give_back).
        for item in self._deferred:
            item.copy = item.original = item.fill = None
        self._state.notify_all()

    def _copy_down(self, item):
        """Copy ``item`` from its end back to what the dump has taken; False
        if the dump has ended."""
        state = self._state
        if item.original is None:
            with state:
                if self._dump_ended:
                    return False
                item.low = 0
                self._left -= item.size
            item.fill()
            with state:
                item.copied = 0
                state.notify_all()
            return True
        while True:
            with state:
                if self._dump_ended:
                    return False
                high = item.low
                low = max(item.taken, high - COPY_BLOCK)
                if low >= high:
                    return True
                wait = 0 if self._dump_waits else self._pace.may_wait(self._left)
                if wait:
                    state.wait(wait)  # woken as the dump lets go of each chunk
                    continue
                item.low = low
                self._left -= high - low
                self._pace.copies(high - low)
            np.copyto(item.copy[low:high], item.original[low:high])
            with state:
                item.copied = low
                state.notify_all()

    def measure_copy_speed(self):
        """Before the dump starts, once per process: copy the end of the
        largest deferred array, timed (:func:`.copy_pace.measure_copy`)."""
        items = [item for item in self._deferred
                 if item.original is not None and item.size >= MEASURED_COPY]
        if items and speed_unknown():
            item = max(items, key=lambda item: item.size)
            low = item.size - MEASURED_COPY
            measure_copy(item.copy[low:], item.original[low:])
            with self._state:
                item.low = item.copied = low
                self._left -= MEASURED_COPY

    def wait_finished(self):
        """Wait until :meth:`copy` has returned or raised (nothing writes
        into the copies' memory any more)."""
        with self._state:
            while not self._finished:
                self._state.wait()

    def _dump_ends(self):
        """The dump reads nothing more (written or failed): the call waits
        for it no longer, nor copies for it."""
        with self._state:
            self._dump_ended = True
            self._state.notify_all()

    def written_by_this_thread(self):
        """A context manager under which :func:`chunks_to_write` on this
        thread cuts the chunks of this snapshot's copies; the dump ends
        when it exits."""
        return _Writing(self)

    def kept_memory(self):
        """Where the dump's chunks lie in the copies' memory, which nothing
        changes once the dump has a chunk of it, and which lives until the
        dump is written (:func:`.snapshot_pickler.kept_in`): with
        :attr:`fill_taken`, every chunk of a whole array the snapshot copied."""
        return kept_in(self._buffers)

    def buffers(self):
        """The memory of the copies (from :class:`Buffers`), handed over
        once the dump of the restored object is done (the snapshot then no
        longer holds it)."""
        buffers, self._buffers = self._buffers, []
        return buffers

    def restore(self):
        """The captured object graph (once: the snapshot is then emptied)."""
        kept, stream = self._kept, self._stream
        self._kept = self._stream = None
        try:
            return SnapshotUnpickler(io.BytesIO(stream), kept).load()
        finally:
            kept.clear()  # the restored object alone holds the copies



class _Writing:
    def __init__(self, snapshot):
        self._snapshot = snapshot

    def __enter__(self):
        _dumping.snapshot = self._snapshot

    def __exit__(self, *exc):
        _dumping.snapshot = None
        self._snapshot._dump_ends()


def take(obj, buffers=None, deferred=False):
    """A :class:`Snapshot` of ``obj``, its copies in memory from ``buffers``
    (a :class:`Buffers`) if given; with ``deferred``, the copies of large
    arrays are left to :meth:`Snapshot.copy`.

    Raises
    ------
    pickle.PicklingError, TypeError, AttributeError
        If ``obj`` holds something that cannot be pickled (what
        :func:`pickle.dumps` raises).
    """
    file = io.BytesIO()
    pickler = SnapshotPickler(file, buffers, deferred)
    try:
        pickler.dump(obj)
    finally:
        used = [] if buffers is None else buffers.taken()
    stream = file.getvalue()
    return Snapshot(stream, pickler.kept, pickler.pins, used, pickler.deferred)
