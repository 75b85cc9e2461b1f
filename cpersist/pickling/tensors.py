"""torch tensors stored through their storages, and rebuilt as views of them.

The pickler hands each CPU dense strided ``torch.Tensor`` (and
``nn.Parameter``) to :class:`TensorReducer`, which stores the tensor's
storage once, as a section of its own, whatever number of tensors view it,
and pickles the tensor as a call of
:func:`cpersist.pickling.rebuild.rebuild_tensor` naming that
section, the dtype by its name, and the view (storage offset, shape,
strides). Loading rebuilds each tensor as that view of its storage, so
tied weights, views and transposes come back sharing memory as with
``torch.load``. The stream names no torch global: a restricted load
rebuilds tensors with nothing allowlisted.

A storage's section holds its bytes as a 1-d numpy array of the dtype of
the first tensor viewing it (numpy's own dtype where it has one, else the
unsigned integer of the same size: ``bfloat16`` as ``uint16``), so that the
codecs group its bytes by the element size.

torch is imported only here, and only when a dump meets a tensor (the
pickler checks :data:`sys.modules` first) or a load rebuilds one.
"""

import pickle
import sys
import warnings
import weakref

import numpy as np

from .rebuild import rebuild_tensor, stored_array


#: torch dtypes numpy has, by torch's name.
_NUMPY_TWINS = {
    "bool": "?", "uint8": "u1", "int8": "i1", "int16": "i2", "uint16": "u2", "int32": "i4",
    "uint32": "u4", "int64": "i8", "uint64": "u8", "float16": "f2", "float32": "f4",
    "float64": "f8", "complex64": "c8", "complex128": "c16",
}
#: Tensor kinds :func:`rebuild_tensor` makes.
KINDS = ("tensor", "parameter")


def _torch():
    import torch

    return torch


_DTYPES = None


def torch_dtypes():
    """``{name: torch.dtype}`` of every dtype whose tensors are stored as
    arrays (not the quantized ones: their tensors keep torch's pickling)."""
    global _DTYPES
    if _DTYPES is None:
        torch = _torch()
        found = {}
        for value in vars(torch).values():
            if isinstance(value, torch.dtype):
                name = str(value).rpartition(".")[2]
                if not name.startswith(("qint", "quint")):
                    found[name] = value
        _DTYPES = found
    return _DTYPES


def numpy_dtype(name, itemsize):
    """The numpy dtype a storage section of torch dtype ``name`` is kept in."""
    return np.dtype(_NUMPY_TWINS.get(name, f"u{itemsize}"))


class _StorageRef:
    """One storage as the pickle stream sees it: a single object per storage,
    so the pickler's memo writes its section once however many tensors view it."""

    __slots__ = ("section", "keep")

    def __init__(self, section, keep):
        self.section = section
        self.keep = keep  # the storage (and its CPU copy): ids stay unique while pickling


class TensorReducer:
    """The tensor half of :class:`cpersist.pickling.pickler.ArrayPickler`.

    Parameters
    ----------
    store : callable
        ``store(arr) -> int``: writes a 1-d numpy array as a section.
    """

    def __init__(self, store):
        self.torch = sys.modules["torch"]
        self.tensor_type = self.torch.Tensor
        self.ref_type = _StorageRef
        self._plain = (self.torch.Tensor, self.torch.nn.Parameter)
        self._store = store
        self._storages = {}

    def reduce(self, tensor):
        """``(rebuild_tensor, args)`` for a tensor cpersist stores, else NotImplemented."""
        torch = self.torch
        cls = type(tensor)
        if cls not in self._plain or not self._storable(tensor):
            return NotImplemented  # torch's own pickling: trusted loads only
        name = str(tensor.dtype).rpartition(".")[2]
        if name not in torch_dtypes():
            return NotImplemented
        device = tensor.device
        storage = tensor.untyped_storage()
        key = (device.type, device.index, storage.data_ptr(), storage.nbytes())
        ref = self._storages.get(key)
        if ref is None:
            on_cpu = storage if device.type == "cpu" else storage.cpu()
            data = torch.empty(0, dtype=torch.uint8).set_(on_cpu).numpy()
            itemsize = tensor.dtype.itemsize
            if data.nbytes % itemsize == 0:
                data = data.view(numpy_dtype(name, itemsize))
            ref = self._storages[key] = _StorageRef(self._store(data), (storage, on_cpu))
        state = tensor.__dict__
        return rebuild_tensor, (
            ref, name, tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()),
            bool(tensor.requires_grad), "parameter" if cls is not torch.Tensor else "tensor",
            dict(state) if state else None,
            None if device.type == "cpu" else str(device),
        )

    def _storable(self, tensor):
        return (tensor.layout is self.torch.strided and not tensor.is_quantized
                and not tensor.is_nested and not tensor.is_conj() and not tensor.is_neg()
                and tensor.device.type != "meta")

    @staticmethod
    def reduce_ref(ref):
        """How a :class:`_StorageRef` pickles: a fetch of its section."""
        return stored_array, (ref.section,)


def _bad(message):
    raise pickle.UnpicklingError(f"bad tensor: {message}")


def check_view(dtype, offset, shape, stride, kind, state, device):
    """Validate :func:`rebuild_tensor`'s arguments (a forged stream gives
    anything); return the torch dtype."""
    tdtype = torch_dtypes().get(dtype) if type(dtype) is str else None
    if tdtype is None:
        _bad(f"unknown dtype {dtype!r}")
    if type(offset) is not int or offset < 0:
        _bad(f"storage offset {offset!r}")
    if (type(shape) is not tuple or type(stride) is not tuple or len(shape) != len(stride)
            or not all(type(n) is int and n >= 0 for n in shape)
            or not all(type(s) is int and s >= 0 for s in stride)):
        _bad(f"shape {shape!r} with strides {stride!r}")
    if kind not in KINDS:
        _bad(f"kind {kind!r}")
    if state is not None and (type(state) is not dict or not all(type(k) is str for k in state)):
        _bad("its attributes are not a dict of names")
    if device is not None and type(device) is not str:
        _bad(f"device {device!r}")
    return tdtype


def view_extent(offset, shape, stride):
    """One past the last storage element the view reaches (``offset`` if empty)."""
    if 0 in shape:
        return offset
    return offset + sum((n - 1) * s for n, s in zip(shape, stride)) + 1


def rebuild(data, dtype, offset, shape, stride, requires_grad, kind, state, device):
    """:func:`cpersist.pickling.rebuild.rebuild_tensor`, which documents the arguments."""
    tdtype = check_view(dtype, offset, shape, stride, kind, state, device)
    if type(requires_grad) is not bool:
        _bad(f"requires_grad {requires_grad!r}")
    from ..lazy.array import LazyArray

    lazy = isinstance(data, LazyArray)
    if not (lazy or isinstance(data, np.ndarray)) or data.ndim != 1:
        _bad("its storage is not a stored array")
    if view_extent(offset, shape, stride) * tdtype.itemsize > data.nbytes:
        _bad(f"the view {shape} (strides {stride}, offset {offset}) reaches past its "
             f"storage of {data.nbytes} bytes")
    if lazy:
        from ..lazy.tensor import LazyTensor

        return LazyTensor(data, tdtype, dtype, offset, shape, stride, requires_grad, kind,
                          device)
    torch = _torch()
    tensor = _empty(torch, tdtype).set_(storage_of(data), offset, shape, stride)
    try:
        if kind == "parameter":
            tensor = torch.nn.Parameter(tensor, requires_grad=requires_grad)
        elif requires_grad:
            tensor.requires_grad_(True)
    except RuntimeError as exc:  # requires_grad on an integer dtype
        _bad(str(exc))
    if state:
        tensor.__dict__.update(state)
    return tensor


def _empty(torch, dtype):
    if dtype is torch.complex32:
        with warnings.catch_warnings():  # "ComplexHalf support is experimental"
            warnings.simplefilter("ignore", UserWarning)
            return torch.empty(0, dtype=dtype)
    return torch.empty(0, dtype=dtype)


def storage_of(data):
    """The torch storage sharing the memory of the 1-d array ``data``.

    A read-only map made by ``mmap_mode='r'`` is private (see
    :func:`cpersist.api._load`): the tensor may write to it, and its writes
    stay in the process, as with ``torch.load(mmap=True)``. Any other
    read-only buffer (``cpersist.loads`` of ``bytes``) is copied.
    """
    if data.flags.writeable:
        return _torch().from_numpy(data.view(np.uint8)).untyped_storage()
    view = data.view(np.ndarray).view(np.uint8)
    try:
        view.flags.writeable = True  # allowed only if the memory is writable
        return _torch().from_numpy(view).untyped_storage()
    except ValueError:
        pass
    # One copy per array, whatever number of tensors view it (the unpickler
    # passes them the same array), so that they still share a storage.
    hit = _COPIES.get(id(data))
    if hit is not None and hit[0]() is data:
        return hit[1]
    storage = _torch().from_numpy(view.copy()).untyped_storage()
    _COPIES[id(data)] = (weakref.ref(data), storage)
    weakref.finalize(data, _COPIES.pop, id(data), None)
    return storage


#: id(read-only array) -> (weak reference to it, the storage copied from it).
_COPIES = {}
