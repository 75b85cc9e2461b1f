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
taken at once): the caller starts the dump of the restored graph on its
thread first, so that the writing of each array overlaps the copies of
those after it. The writing thread calls :func:`wait_for_copy` before it
reads an array's memory (``write_sections`` does, for each section).
"""

import bisect
import io
import pickle
import sys
import threading

import numpy as np

from .arrays import is_plain_data


def _kept(index):
    """Stand-in the stream names for a set-aside object; the unpickler of
    :meth:`Snapshot.restore` replaces it (it is never called)."""
    raise pickle.UnpicklingError("a snapshot is restored by Snapshot.restore only")


#: Arrays and storages of at least this many bytes are copied by
#: :meth:`Snapshot.copy` when the snapshot is deferred. A dump keeps arrays
#: under ``cpersist.pickling.write.INLINE_BELOW`` (64 KiB) in its pickle
#: stream, which is written without :func:`wait_for_copy`: this is above it.
DEFER_FROM = 1 << 20

#: The deferred snapshot whose copies the current thread's dump waits for.
_dumping = threading.local()


def wait_for_copy(arr):
    """Wait until the copy holding ``arr``'s memory is done, if ``arr`` is
    part of the deferred snapshot this thread is dumping (see
    :meth:`Snapshot.waited_for_by_this_thread`); else return at once."""
    snapshot = getattr(_dumping, "snapshot", None)
    if snapshot is not None:
        snapshot.wait_copied(arr)


class IncompleteSnapshot(RuntimeError):
    """The copies of a deferred snapshot stopped before the end (the call
    taking it was interrupted): its dump must not be written."""


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
    filled: see :func:`_fill_storage`), its memory from ``buffers`` if given."""
    if buffers is None or storage.nbytes() == 0:
        return torch.UntypedStorage(storage.nbytes()) if empty else storage.clone()
    copy = torch.frombuffer(buffers.take(storage.nbytes()), dtype=torch.uint8)
    if not empty:
        _fill_storage(torch, copy.untyped_storage(), storage)
    return copy.untyped_storage()


def _fill_storage(torch, copy, storage):
    uint8 = torch.uint8
    torch.empty(0, dtype=uint8).set_(copy).copy_(torch.empty(0, dtype=uint8).set_(storage))


class Snapshot:
    """An object graph as :func:`take` captured it."""

    def __init__(self, stream, kept, pins, buffers, deferred=()):
        self._stream = stream
        self._kept = kept
        self._pins = pins  # alive as long as the snapshot, after restore()
        self._buffers = buffers
        # Deferred copies, in order: (copy function, start address, end address).
        self._deferred = list(deferred)
        # By address, to find the copy holding an array's memory:
        # (start, end, its number in the order of the copies).
        self._by_address = sorted((start, end, number)
                                  for number, (_, start, end) in enumerate(self._deferred))
        self._starts = [start for start, _, _ in self._by_address]
        self._copied = 0
        self._finished = not self._deferred  # copy() has returned or raised
        self._progress = threading.Condition()

    def copy(self):
        """Make the deferred copies, in order (on the thread that took the
        snapshot, before it returns to its caller). If it stops early, the
        dump waiting for a copy raises :class:`IncompleteSnapshot`."""
        try:
            for number, (copy, _, _) in enumerate(self._deferred):
                copy()
                with self._progress:
                    self._copied = number + 1
                    self._progress.notify_all()
        finally:
            with self._progress:
                self._finished = True
                self._deferred = []  # the originals are no longer needed
                self._progress.notify_all()

    def wait_finished(self):
        """Wait until :meth:`copy` has returned or raised (nothing writes
        into the copies' memory any more)."""
        with self._progress:
            while not self._finished:
                self._progress.wait()

    def wait_copied(self, arr):
        """Wait until the deferred copy holding ``arr``'s memory is done (at
        once if none holds it)."""
        if not self._starts or arr.nbytes == 0:
            return
        address = arr.__array_interface__["data"][0]
        place = bisect.bisect_right(self._starts, address) - 1
        if place < 0 or address >= self._by_address[place][1]:
            return
        number = self._by_address[place][2]
        with self._progress:
            while self._copied <= number:
                if self._finished:
                    raise IncompleteSnapshot("the snapshot of the object was interrupted "
                                             "before all its arrays were copied")
                self._progress.wait()

    def waited_for_by_this_thread(self):
        """A context manager under which :func:`wait_for_copy` on this
        thread waits for this snapshot's copies."""
        return _Waiting(self)

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


class _Waiting:
    def __init__(self, snapshot):
        self._snapshot = snapshot

    def __enter__(self):
        _dumping.snapshot = self._snapshot

    def __exit__(self, *exc):
        _dumping.snapshot = None


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
        self.deferred = []  # (copy function, start address, end address)
        self.kept = []
        self.pins = []  # host views of the JAX arrays kept (see _host_views)
        self._storages = {}  # torch storage key -> _StorageOf its copy
        # The storages copied, alive while pickling so that no other storage
        # takes the address of one (in its key).
        self._originals = []
        self._jax_type = None

    def _later(self, copy, start, nbytes):
        self.deferred.append((copy, start, start + nbytes))

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
                self._later(lambda: np.copyto(copy, obj, casting="no"), copy.ctypes.data,
                            copy.nbytes)
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
                self._later(lambda: _fill_storage(torch, copy, storage), copy.data_ptr(),
                            copy.nbytes())
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
