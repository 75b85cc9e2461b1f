"""torch tensors stored through their storages (rebuilt by
:func:`cpersist.pickling.rebuild.rebuild_tensor`).

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

Storages of the dtypes in :data:`FAVOUR_SPEED` are compressed by the
codec's faster form (:meth:`cpersist.codecs.Codec.favouring_speed`).

torch is imported (by :mod:`.torch_dtypes`) only when a dump meets a tensor
(the pickler checks :data:`sys.modules` first) or a load rebuilds one.
"""

import sys

from .rebuild import rebuild_tensor, stored_array
from .torch_dtypes import numpy_dtype, torch_dtypes


#: torch dtypes whose storages are compressed favouring speed. Most
#: exponent bits of bfloat16 weights are the same in every value: Blosc's
#: bit shuffle puts each bit position together, and LZ4 behind it finds
#: most of what byte grouping with Zstandard does, several times faster.
#: float8 weights come out clearly larger that way than with plain
#: Zstandard, and float16 weights save much less than with byte grouping,
#: which is already fast on them: both keep the default.
FAVOUR_SPEED = frozenset({"bfloat16"})


class _StorageRef:
    """One storage as the pickle stream sees it: a single object per storage,
    so the pickler's memo writes its section once however many tensors view it."""

    __slots__ = ("section", "keep")

    def __init__(self, section, keep):
        self.section = section
        self.keep = keep  # the storage (and its CPU copy): ids stay unique while pickling


class TensorReducer:
    """The tensor half of :class:`cpersist.pickling.array_pickler.ArrayPickler`.

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
        self._names = {}  # torch dtype -> its name

    def forget(self):
        """Forget the storages stored so far (see ``ArrayPickler.forget``)."""
        self._storages.clear()

    def reduce(self, tensor):
        """``(rebuild_tensor, args)`` for a tensor cpersist stores, else NotImplemented."""
        torch = self.torch
        cls = type(tensor)
        if cls not in self._plain or not self._storable(tensor):
            return NotImplemented  # torch's own pickling: trusted loads only
        name = self._names.get(tensor.dtype)
        if name is None:
            name = str(tensor.dtype).rpartition(".")[2]
            if name not in torch_dtypes():
                return NotImplemented
            # One string per dtype: the pickler then writes it once per
            # stream, and a reference to it for every other tensor.
            self._names[tensor.dtype] = name
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
            section = self._store(data, favour_speed=name in FAVOUR_SPEED)
            ref = self._storages[key] = _StorageRef(section, (storage, on_cpu))
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
