"""How a snapshot (:mod:`.snapshot`) sets an object's arrays aside: the
pickler that copies each numpy array, CPU torch storage and JAX array's
data once (into memory reused from the previous snapshot,
:class:`Buffers`), or leaves the copy of a large one to the snapshot
(:class:`Deferred`), and the unpickler that hands the copies back."""

import bisect
import pickle
import sys
import threading

import numpy as np

from .._runtime.pages import fault_in
from ..container.layout import PAGE, PAGE_ALIGNED_FROM
from .arrays import byte_view, is_plain_data


def _kept(index):
    """Stand-in the stream names for a set-aside object; the unpickler of
    :meth:`~.snapshot.Snapshot.restore` replaces it (it is never called)."""
    raise pickle.UnpicklingError("a snapshot is restored by Snapshot.restore only")


#: Arrays and storages of at least this many bytes are copied by
#: :meth:`~.snapshot.Snapshot.copy` when the snapshot is deferred. A dump keeps arrays
#: under ``cpersist.pickling.write.INLINE_BELOW`` (64 KiB) in its pickle
#: stream, whose writing does not go through :func:`chunks_to_write`: this
#: is above it.
DEFER_FROM = 1 << 20

#: Whether a snapshot copies the data of JAX arrays (into memory reused
#: from the previous snapshot, as numpy arrays') rather than holding their
#: buffers until the dump is written. JAX arrays are immutable, but a
#: jitted step that donates one (``donate_argnums``, as training loops do)
#: reuses its buffer for the result only if nothing else views it: held,
#: the step after the call writes its results into fresh memory, whose
#: page faults cost several times the copy. The maintainers' lab
#: (benchmarks/training_loop.py, ``pinned``) compares both ways.
COPY_JAX = True


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
        self._new = 0
        #: Bytes of memory new to the process among the buffers that
        #: :meth:`taken` last returned (its pages not backed yet).
        self.new_bytes = 0

    def take(self, nbytes):
        """A 1-d uint8 array of ``nbytes``."""
        with self._lock:
            spare = self._spare.get(nbytes)
            buffer = spare.pop() if spare else None
        if buffer is None:
            buffer = _new_buffer(nbytes)
            self._new += nbytes
        self._used.append(buffer)
        return buffer

    def taken(self):
        """The buffers taken since the last call (those of one snapshot);
        spare ones not taken are freed."""
        used, self._used = self._used, []
        self.new_bytes, self._new = self._new, 0
        with self._lock:
            self._spare = {}
        return used

    def give_back(self, buffers):
        """Keep ``buffers`` for the next snapshot, except any still referenced
        (by an object of the dump that outlived it), their pages backed now.

        A deferred snapshot's call copies only part of each large buffer
        (the dump reads the rest from the originals), and which part varies:
        a page no call has copied into yet would cost the next one a page
        fault, on the caller's thread, that zeroes it first (on a virtual
        machine, several times the copy). Faulted in here, on the dump's
        thread, each page is so once (pages already backed cost nothing).
        """
        spare = {}
        for buffer in buffers:
            # References: the list, the loop variable and getrefcount's argument.
            if sys.getrefcount(buffer) <= 3:
                fault_in(memoryview(buffer))
                spare.setdefault(buffer.nbytes, []).append(buffer)
        with self._lock:
            self._spare = spare


def _new_buffer(nbytes):
    """A 1-d uint8 array of ``nbytes``, starting at a multiple of
    :data:`~cpersist.container.layout.PAGE` in memory from
    :data:`~cpersist.container.layout.PAGE_ALIGNED_FROM` bytes on: such an
    array's section starts at one in the file, and a dump written around
    the page cache writes it from this memory, which the disk reads only
    from such addresses."""
    if nbytes < PAGE_ALIGNED_FROM:
        return np.empty(nbytes, np.uint8)
    memory = np.empty(nbytes + PAGE, np.uint8)
    start = -memory.ctypes.data % PAGE
    return memory[start:start + nbytes]


def kept_in(arrays):
    """A function of a memoryview: ``(array, offset)`` where its memory lies
    in one of ``arrays`` (1-d uint8), or None (what
    :class:`cpersist.container.direct_io.DirectFile` takes as ``kept``)."""
    arrays = sorted(arrays, key=lambda array: array.ctypes.data)
    starts = [array.ctypes.data for array in arrays]

    def find(view):
        address = np.frombuffer(view, np.uint8).ctypes.data
        place = bisect.bisect_right(starts, address) - 1
        if place >= 0 and address + view.nbytes <= starts[place] + arrays[place].nbytes:
            return arrays[place], address - starts[place]
        return None

    return find


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


class Deferred:
    """An array or storage whose copy :meth:`~.snapshot.Snapshot.copy` makes, and how
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


class SnapshotUnpickler(pickle.Unpickler):
    def __init__(self, file, kept):
        super().__init__(file)
        self._kept = kept

    def find_class(self, module, name):
        if module == __name__ and name == "_kept":
            return self._kept.__getitem__
        return super().find_class(module, name)


class SnapshotPickler(pickle.Pickler):
    def __init__(self, file, buffers, deferred):
        super().__init__(file, pickle.HIGHEST_PROTOCOL)
        self._buffers = buffers
        self._defer = deferred
        self.deferred = []  # Deferred, in the order met
        self.kept = []
        self.pins = []  # host views of JAX arrays not copied (see _JaxHostData)
        self._storages = {}  # torch storage key -> _StorageOf its copy
        # The storages copied, alive while pickling so that no other storage
        # takes the address of one (in its key).
        self._originals = []
        self._jax = None  # a jax_arrays.JaxReducer, once a JAX array is met

    def _keep(self, obj):
        self.kept.append(obj)
        return _kept, (len(self.kept) - 1,)

    def reducer_override(self, obj):
        cls = type(obj)
        if cls is np.ndarray or cls is np.memmap:
            if not is_plain_data(obj):
                return NotImplemented
            return self._keep(self._copy(obj))
        if isinstance(obj, np.ndarray):
            return NotImplemented
        if "torch" in sys.modules:
            torch = sys.modules["torch"]
            if cls is torch.Tensor or cls is torch.nn.Parameter:
                return self._reduce_tensor(torch, obj)
        if "jax" in sys.modules:
            if self._jax is None:
                from .jax_arrays import JaxReducer
                from .rebuild import rebuild_jax

                self._jax = JaxReducer(rebuild_jax)
            if self._jax.is_jax_array(obj, cls) and not obj.is_deleted():
                reduced = self._jax.reduce(obj)
                if reduced is not NotImplemented:
                    rebuild, (data, placement) = reduced
                    shards = data if type(data) is tuple else (data,)
                    if not (COPY_JAX and self._jax.on_cpu(obj)):
                        # Off the CPU, the data is a host copy that nothing reuses.
                        self.pins.append(shards)
                        return self._keep(_JaxHostData(reduced))
                    copies = tuple(map(self._copy, shards))
                    data = copies if type(data) is tuple else copies[0]
                    return self._keep(_JaxHostData((rebuild, (data, placement))))
        return NotImplemented

    def _copy(self, arr):
        """The snapshot's copy of numpy array ``arr``: made now, or, as
        deferred, left to the snapshot (its memory taken now); read-only if
        ``arr`` is, as its pickling tells (bytes rather than a bytearray
        inside the stream)."""
        if not (self._defer and arr.nbytes >= DEFER_FROM):
            copy = copy_array(arr, self._buffers)
        else:
            copy = _empty_like(arr, self._buffers)
            # _empty_like orders the copy as a contiguous original: their
            # bytes are in the same order.
            if arr.flags.c_contiguous or arr.flags.f_contiguous:
                item = Deferred(byte_view(copy), byte_view(arr))
            else:
                # Its own view of the copy: writable after the copy's flag is cleared.
                into = copy.view()
                item = Deferred(byte_view(copy), None,
                                lambda: np.copyto(into, arr, casting="no"))
            self.deferred.append(item)
        if not arr.flags.writeable:
            copy.flags.writeable = False
        return copy

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
                self.deferred.append(Deferred(_storage_bytes(torch, copy),
                                               _storage_bytes(torch, storage)))
            _, (index,) = self._keep(copy)
            ref = self._storages[key] = _StorageOf(index)
        state = tensor.__dict__
        return _tensor, (
            ref, tensor.dtype, tensor.storage_offset(), tuple(tensor.shape),
            tuple(tensor.stride()), bool(tensor.requires_grad),
            type(tensor) is torch.nn.Parameter, dict(state) if state else None)


class _JaxHostData:
    """A JAX array as the dump stores it: ``(rebuild_jax, (data,
    placement))`` (:meth:`.jax_arrays.JaxReducer.reduce`), its data the
    snapshot's copies of the array's CPU buffers (numpy arrays), or, without
    :data:`COPY_JAX`, numpy views of them, which keep the buffers alive and
    unchanged whatever the caller does with the array after the call (jax
    frees a buffer on ``Array.delete()`` or reuses it for a donating
    function's result only once no view of it is left); off the CPU, the
    host copy ``numpy.asarray`` made. Either way the dump never reads the
    array itself, which may be deleted by then."""

    __slots__ = ("_reduced",)

    def __init__(self, reduced):
        self._reduced = reduced

    def __reduce__(self):
        return self._reduced


class _StorageOf:
    """The copy of a storage set aside at ``kept[index]``, in the arguments
    of each tensor viewing it."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index

    def __reduce__(self):
        return _kept, (self.index,)
