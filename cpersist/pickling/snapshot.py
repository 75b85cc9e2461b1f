"""A snapshot of an object graph, taken on the calling thread so that a
background dump writes the object as it was at the call.

:func:`take` pickles the graph with :class:`_SnapshotPickler`: everything but
arrays goes into an in-memory pickle stream (so non-array state is captured
by value), and each array is set aside instead of being serialized:

* a numpy array of plain data (and a ``np.memmap``, stored as a plain array
  as a dump stores it): its bytes copied once into a new array of the same
  order (C or F; a non-contiguous one as C, the order a dump stores it in),
  in memory of the previous snapshot where there is some (:class:`Buffers`);
* a CPU ``torch.Tensor`` or ``nn.Parameter`` that cpersist stores as a
  section: its storage copied once, however many tensors view it, so that
  views and tied weights still share memory in the snapshot;
* a ``jax.Array``: kept as it is, without a copy: JAX arrays are immutable
  (but may be donated: see :func:`_host_views`).

Anything else (object arrays, masked arrays, other tensors) keeps its own
pickling, which copies its data into the stream. :meth:`Snapshot.restore`
unpickles the stream on the writing thread, handing back the set-aside
arrays, into an object graph equal to the original at the call and sharing
no mutable memory with it.

With ``deferred=True``, the copies of arrays and storages of at least
:data:`DEFER_FROM` bytes are left to :meth:`Snapshot.copy` (their memory
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
"""

import bisect
import collections
import io
import pickle
import sys
import threading

import numpy as np

from .arrays import byte_view, is_plain_data, iter_chunks


def _kept(index):
    """Stand-in the stream names for a set-aside object; the unpickler of
    :meth:`Snapshot.restore` replaces it (it is never called)."""
    raise pickle.UnpicklingError("a snapshot is restored by Snapshot.restore only")


#: Arrays and storages of at least this many bytes are copied by
#: :meth:`Snapshot.copy` when the snapshot is deferred. A dump keeps arrays
#: under ``cpersist.pickling.write.INLINE_BELOW`` (64 KiB) in its pickle
#: stream, whose writing does not go through :func:`chunks_to_write`: this
#: is above it.
DEFER_FROM = 1 << 20

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
        return iter_chunks(arr, chunk_size), None
    return snapshot.chunks(arr, chunk_size)


class IncompleteSnapshot(RuntimeError):
    """The copies of a deferred snapshot stopped before the end (the call
    taking it was interrupted), or a dump needed bytes of an original after
    the call had returned: its dump must not be written."""


def _tensor(storage, dtype, offset, shape, stride, requires_grad, parameter, state):
    """A tensor viewing ``storage`` (the snapshot's copy) as the original viewed its own."""
    torch = sys.modules["torch"]
    tensor = torch.empty(0, dtype=dtype).set_(storage, offset, shape, stride)
    if parameter:
        tensor = torch.nn.Parameter(tensor, requires_grad=requires_grad)
    elif requires_grad:
        tensor.requires_grad_(True)
    if state:
        tensor.__dict__.update(state)
    return tensor


class Buffers:
    """Memory for the copies of a snapshot, reused from the previous one.

    A copy into fresh memory costs the kernel a page fault per page, several
    times the copy itself; a training loop snapshots arrays of the same
    sizes each time. :meth:`give_back` keeps the buffers of a snapshot whose
    dump is done (those nothing else references any more), and the next
    snapshot takes them by size; the rest are freed when it is taken. So
    between background dumps, at most one snapshot's memory is kept.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._spare = {}  # nbytes -> list of uint8 arrays
        self._used = []

    def take(self, nbytes):
        """A 1-d uint8 array of ``nbytes``."""
        with self._lock:
            spare = self._spare.get(nbytes)
            buffer = spare.pop() if spare else None
        if buffer is None:
            buffer = np.empty(nbytes, np.uint8)
        self._used.append(buffer)
        return buffer

    def taken(self):
        """The buffers taken since the last call (those of one snapshot);
        spare ones not taken are freed."""
        used, self._used = self._used, []
        with self._lock:
            self._spare = {}
        return used

    def give_back(self, buffers):
        """Keep ``buffers`` for the next snapshot, except any still referenced
        (by an object of the dump that outlived it)."""
        spare = {}
        for buffer in buffers:
            # References: the list, the loop variable and getrefcount's argument.
            if sys.getrefcount(buffer) <= 3:
                spare.setdefault(buffer.nbytes, []).append(buffer)
        with self._lock:
            self._spare = spare


def copy_array(arr, buffers=None):
    """``arr``'s values in a new array (one copy of its bytes), C- or
    F-ordered as it is, C-ordered if it is neither; its memory from
    ``buffers`` (a :class:`Buffers`) if given."""
    copy = _empty_like(arr, buffers)
    np.copyto(copy, arr, casting="no")
    return copy


def _empty_like(arr, buffers):
    """An array for :func:`copy_array`'s copy of ``arr``, not yet filled."""
    order = "F" if arr.flags.f_contiguous and not arr.flags.c_contiguous else "C"
    if buffers is None or arr.nbytes == 0:
        return np.empty(arr.shape, arr.dtype, order=order)
    return np.ndarray(arr.shape, arr.dtype, buffers.take(arr.nbytes), order=order)


def _copy_storage(torch, storage, buffers, empty=False):
    """A copy of a torch storage (with ``empty``, memory for it, not yet
    filled), its memory from ``buffers`` if given."""
    if buffers is None or storage.nbytes() == 0:
        return torch.UntypedStorage(storage.nbytes()) if empty else storage.clone()
    copy = torch.frombuffer(buffers.take(storage.nbytes()), dtype=torch.uint8)
    if not empty:
        _fill_storage(torch, copy.untyped_storage(), storage)
    return copy.untyped_storage()


def _fill_storage(torch, copy, storage):
    uint8 = torch.uint8
    torch.empty(0, dtype=uint8).set_(copy).copy_(torch.empty(0, dtype=uint8).set_(storage))


def _storage_bytes(torch, storage):
    """A uint8 numpy view of a CPU storage's memory."""
    return torch.empty(0, dtype=torch.uint8).set_(storage).numpy()


class _Deferred:
    """An array or storage whose copy :meth:`Snapshot.copy` makes, and how
    far the call and the dump have got with it. Offsets count bytes in
    memory order, the same in the copy and the original."""

    __slots__ = ("copy", "original", "fill", "start", "size", "taken", "low", "copied",
                 "filled")

    def __init__(self, copy, original, fill=None):
        self.copy = copy  # uint8 view of the copy's memory
        # uint8 view of the original's memory in the same order, or None
        # (not contiguous): then ``fill()`` copies it all at once, and the
        # dump never reads it.
        self.original = original
        self.fill = fill
        self.start = copy.ctypes.data
        self.size = copy.nbytes
        self.taken = 0  # the dump has read [0, taken) from the original,
        self.filled = 0  # and put [0, filled) of it in the copy itself;
        self.low = self.size  # the call has claimed [low, size)
        self.copied = self.size  # and copied [copied, size)


class Snapshot:
    """An object graph as :func:`take` captured it."""

    def __init__(self, stream, kept, pins, buffers, deferred=()):
        self._stream = stream
        self._kept = kept
        self._pins = pins  # alive as long as the snapshot, after restore()
        self._buffers = buffers
        # The deferred copies (_Deferred), in the order the dump meets them.
        self._deferred = list(deferred)
        self._by_address = sorted(self._deferred, key=lambda item: item.start)
        self._starts = [item.start for item in self._by_address]
        self._state = threading.Condition()
        # Under _state:
        self._reading = 0  # chunks the dump is reading from originals
        self._finished = not self._deferred  # copy() has returned or raised
        self._broken = False  # copy() raised: the originals may have changed
        self._dump_ended = False
        #: Bytes the dump has read from originals rather than from copies.
        self.from_originals = 0

    def copy(self):
        """Make the deferred copies, from the last back to what the dump has
        taken from the originals, then wait until the dump no longer reads
        any original (on the thread that took the snapshot, before it
        returns to its caller). If it stops early, the dump raises
        :class:`IncompleteSnapshot` on the first chunk it cannot have."""
        state = self._state
        complete = False
        try:
            for item in reversed(self._deferred):
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
                item.low = low
            np.copyto(item.copy[low:high], item.original[low:high])
            with state:
                item.copied = low
                state.notify_all()

    def wait_finished(self):
        """Wait until :meth:`copy` has returned or raised (nothing writes
        into the copies' memory any more)."""
        with self._state:
            while not self._finished:
                self._state.wait()

    def chunks(self, arr, chunk_size):
        """:func:`chunks_to_write` for the dump of this snapshot.

        The whole of a copy (the array the restored object holds, or a
        storage) is cut into chunks lazily: each comes from the original
        while the call has not claimed it, else from the copy once it is
        made. Any other array in a copy's memory (a view some object's
        pickling makes of it) is read from the copy once the call has
        copied all of it.
        """
        item = self._holding(arr)
        if item is None:
            return iter_chunks(arr, chunk_size), None
        whole = ((arr.flags.c_contiguous or arr.flags.f_contiguous)
                 and arr.__array_interface__["data"][0] == item.start and arr.nbytes == item.size)
        if not whole:
            self._all_copied(item)
            return iter_chunks(arr, chunk_size), None
        sources = collections.deque()  # per chunk handed out: whether from the original
        return self._whole(item, arr, chunk_size, sources), lambda: self._release(sources)

    def _holding(self, arr):
        """The _Deferred whose copy holds ``arr``'s memory, or None."""
        if not self._starts or arr.nbytes == 0:
            return None
        address = arr.__array_interface__["data"][0]
        place = bisect.bisect_right(self._starts, address) - 1
        if place < 0:
            return None
        item = self._by_address[place]
        return item if address < item.start + item.size else None

    def _whole(self, item, arr, chunk_size, sources):
        state = self._state
        low = 0
        for chunk in iter_chunks(arr, chunk_size):
            high = low + len(chunk)
            with state:
                original = self._source(item, low, high)
                if original is not None:
                    self._reading += 1
            if original is not None:
                self.from_originals += high - low
                chunk = memoryview(original[low:high])
            sources.append(original is not None)
            yield chunk
            low = high

    def _source(self, item, low, high):
        """The original's bytes if the dump reads ``[low, high)`` of
        ``item`` from them, or None if from the copy (once it is made
        there); under ``_state``."""
        if self._broken:
            raise _incomplete()
        if not self._finished and item.original is not None:
            if low <= item.taken and high <= item.low:
                item.taken = max(item.taken, high)  # not the call's to copy any more
                return item.original
            if low < item.taken and high > item.filled:
                return item.original  # again: it is not in the copy
        if high <= item.filled:
            return None
        if low < item.taken:  # taken by the dump, not in the copy, too late
            raise _read_twice()
        while item.copied > low:  # the call copies down to item.taken <= low
            if self._finished:
                raise _incomplete()
            self._state.wait()
        return None

    def _release(self, sources):
        if sources.popleft():
            with self._state:
                self._reading -= 1
                self._state.notify_all()
                if self._broken:  # the caller may have changed the original already
                    raise _incomplete()

    def _all_copied(self, item):
        """Wait until the whole of ``item`` is in its copy: the call's part
        copied, and the part the dump read from the original put in it."""
        state = self._state
        with state:
            if self._broken:
                raise _incomplete()
            filling = item.filled < item.taken
            if filling:
                if self._finished:
                    raise _read_twice()
                self._reading += 1
                low, high = item.filled, item.taken
                copy, original = item.copy, item.original
        if filling:
            try:
                np.copyto(copy[low:high], original[low:high])
            finally:
                with state:
                    self._reading -= 1
                    item.filled = high
                    state.notify_all()
        with state:
            while item.copied > item.taken:
                if self._finished:
                    raise _incomplete()
                state.wait()

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
            return _SnapshotUnpickler(io.BytesIO(stream), kept).load()
        finally:
            kept.clear()  # the restored object alone holds the copies


def _incomplete():
    return IncompleteSnapshot("the snapshot of the object was interrupted before all its "
                              "arrays were copied")


def _read_twice():
    # Only an object whose pickling stores one array's memory twice (a view
    # of it besides the array) gets here.
    return IncompleteSnapshot("a dump read part of an array twice, the second time after "
                              "the call that took its snapshot had returned")


class _Writing:
    def __init__(self, snapshot):
        self._snapshot = snapshot

    def __enter__(self):
        _dumping.snapshot = self._snapshot

    def __exit__(self, *exc):
        _dumping.snapshot = None
        self._snapshot._dump_ends()


class _SnapshotUnpickler(pickle.Unpickler):
    def __init__(self, file, kept):
        super().__init__(file)
        self._kept = kept

    def find_class(self, module, name):
        if module == __name__ and name == "_kept":
            return self._kept.__getitem__
        return super().find_class(module, name)


class _SnapshotPickler(pickle.Pickler):
    def __init__(self, file, buffers, deferred):
        super().__init__(file, pickle.HIGHEST_PROTOCOL)
        self._buffers = buffers
        self._defer = deferred
        self.deferred = []  # _Deferred, in the order met
        self.kept = []
        self.pins = []  # host views of the JAX arrays kept (see _host_views)
        self._storages = {}  # torch storage key -> _StorageOf its copy
        # The storages copied, alive while pickling so that no other storage
        # takes the address of one (in its key).
        self._originals = []
        self._jax_type = None

    def _keep(self, obj):
        self.kept.append(obj)
        return _kept, (len(self.kept) - 1,)

    def reducer_override(self, obj):
        cls = type(obj)
        if cls is np.ndarray or cls is np.memmap:
            if not is_plain_data(obj):
                return NotImplemented
            if self._defer and obj.nbytes >= DEFER_FROM:
                copy = _empty_like(obj, self._buffers)
                # _empty_like orders the copy as a contiguous original: their
                # bytes are in the same order.
                if obj.flags.c_contiguous or obj.flags.f_contiguous:
                    item = _Deferred(byte_view(copy), byte_view(obj))
                else:
                    item = _Deferred(byte_view(copy), None,
                                     lambda: np.copyto(copy, obj, casting="no"))
                self.deferred.append(item)
                return self._keep(copy)
            return self._keep(copy_array(obj, self._buffers))
        if isinstance(obj, np.ndarray):
            return NotImplemented
        if "torch" in sys.modules:
            torch = sys.modules["torch"]
            if cls is torch.Tensor or cls is torch.nn.Parameter:
                return self._reduce_tensor(torch, obj)
        if "jax" in sys.modules:
            if self._jax_type is None:
                from .jax_arrays import JaxReducer

                self._jax_type = JaxReducer(None).array_type
            if cls is self._jax_type:
                self.pins.append(_host_views(obj))
                return self._keep(obj)  # immutable: no copy
        return NotImplemented

    def _reduce_tensor(self, torch, tensor):
        if (tensor.device.type != "cpu" or tensor.layout is not torch.strided
                or tensor.is_quantized or tensor.is_nested or tensor.is_conj()
                or tensor.is_neg()):
            return NotImplemented  # torch's own pickling copies it
        storage = tensor.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes())
        ref = self._storages.get(key)
        if ref is None:
            self._originals.append(storage)
            defer = self._defer and storage.nbytes() >= DEFER_FROM
            copy = _copy_storage(torch, storage, self._buffers, defer)
            if defer:
                self.deferred.append(_Deferred(_storage_bytes(torch, copy),
                                               _storage_bytes(torch, storage)))
            _, (index,) = self._keep(copy)
            ref = self._storages[key] = _StorageOf(index)
        state = tensor.__dict__
        return _tensor, (
            ref, tensor.dtype, tensor.storage_offset(), tuple(tensor.shape),
            tuple(tensor.stride()), bool(tensor.requires_grad),
            type(tensor) is torch.nn.Parameter, dict(state) if state else None)


def _host_views(array):
    """numpy views of a JAX array's buffers on the CPU (host copies from
    another device). While they live, jax does not reuse the buffers: a
    jitted function given the array in ``donate_argnums`` leaves it as it is
    (and writes its result elsewhere) instead of deleting it under the dump."""
    if not array.is_fully_addressable or array.is_deleted():
        return ()  # the dump reports what it can store of it
    return tuple(np.asarray(shard.data) for shard in array.addressable_shards)


class _StorageOf:
    """The copy of a storage set aside at ``kept[index]``, in the arguments
    of each tensor viewing it."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index

    def __reduce__(self):
        return _kept, (self.index,)


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
    pickler = _SnapshotPickler(file, buffers, deferred)
    try:
        pickler.dump(obj)
    finally:
        used = [] if buffers is None else buffers.taken()
    stream = file.getvalue()
    return Snapshot(stream, pickler.kept, pickler.pins, used, pickler.deferred)
