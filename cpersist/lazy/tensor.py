"""LazyTensor: a torch tensor stored in a cpersist file, read a slice at a time.

A tensor is a view of a stored storage (see :mod:`cpersist.pickling.tensors`). When
it covers its storage exactly in C or Fortran order (the weights of a state
dict), indexing it is indexing a :class:`~cpersist.LazyArray` of the
storage's section seen with the tensor's shape: only the chunks holding
the selected elements are read. Any other view (a slice, a transpose of
part of a storage) reads the storage bytes its selected rows along the
first axis span, and torch's own indexing picks the elements from them.
"""

import math
import operator

import numpy as np

from ..pickling.torch_dtypes import numpy_dtype, view_extent
from .array import LazyArray


def _contiguous_order(shape, stride):
    """``"C"`` or ``"F"`` if the strides are those of a contiguous array of
    ``shape`` in that order (dimensions of length 1 aside), else None."""
    for order, axes in (("C", range(len(shape) - 1, -1, -1)), ("F", range(len(shape)))):
        expected = 1
        for axis in axes:
            if shape[axis] != 1 and stride[axis] != expected:
                break
            expected *= shape[axis]
        else:
            return order
    return None


def _reshaped(lazy, path, dtype, shape, order):
    """``lazy`` (a whole section) seen as an array of ``dtype`` and ``shape``."""
    meta = {k: v for k, v in lazy._meta.items() if k != "rows_per_chunk"}
    nbytes = math.prod(shape) * dtype.itemsize
    return LazyArray(lazy._file, lazy._index, path, meta, bound=lazy._bound,
                     fingerprint=lazy._fingerprint, verify=lazy._verify,
                     n_threads=lazy._n_threads, layout=(dtype, tuple(shape), order, nbytes))


class LazyTensor:
    """A torch tensor in a cpersist file, read only where it is indexed.

    Made by :func:`cpersist.open` (``handle.arrays`` lists one per stored
    tensor, ``handle.load(lazy=True)`` puts them in place of tensors),
    never directly. Indexing it with what torch's basic indexing takes
    (integers, slices of positive step, ``...``, ``None``) returns the
    tensor the same index gives on the tensor in memory, of the stored
    dtype, reading only the chunks it needs; :meth:`read` reads it all.

    Attributes
    ----------
    path : str
        Where the tensor sits in the object (``obj['model']['0.weight']``).
    shape : torch.Size
    dtype : torch.dtype
    ndim : int
    stride : tuple of int
        The strides of the tensor as it was dumped (a view of its storage).
    requires_grad : bool
    kind : str
        ``"tensor"`` or ``"parameter"``.
    device : str
        The device it was dumped from; reads give CPU tensors.
    """

    __slots__ = ("_storage", "_direct", "_bytes", "path", "dtype", "_name", "_offset", "shape",
                 "stride", "requires_grad", "kind", "device")

    def __init__(self, storage, dtype, name, offset, shape, stride, requires_grad, kind,
                 device, path=None):
        import torch

        self._storage = storage
        self.path = path if path is not None else storage.path
        self.dtype = dtype
        self._name = name
        self._offset = offset
        self.shape = torch.Size(shape)
        self.stride = tuple(stride)
        self.requires_grad = requires_grad
        self.kind = kind
        self.device = device or "cpu"
        size = dtype.itemsize
        order = _contiguous_order(shape, stride)
        self._direct = None
        if (offset == 0 and order is not None and math.prod(shape)
                and math.prod(shape) * size == storage.nbytes):
            self._direct = _reshaped(storage, self.path, numpy_dtype(name, size), shape, order)
        self._bytes = None

    def __reduce__(self):
        return _rebuild, (self._storage, self._name, self._offset, tuple(self.shape),
                          self.stride, self.requires_grad, self.kind, self.device, self.path)

    @property
    def ndim(self):
        return len(self.shape)

    def numel(self):
        return math.prod(self.shape)

    @property
    def nbytes(self):
        return self.numel() * self.dtype.itemsize

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self):
        return (f"<LazyTensor {self.path} {self._name} {tuple(self.shape)} "
                f"in {self._storage._file.name}>")

    def read(self):
        """The whole tensor, as a new CPU tensor (of the stored dtype)."""
        return self[...]

    def __getitem__(self, index):
        if self._direct is not None:
            return self._as_tensor(self._direct[index])
        return self._view_getitem(index if type(index) is tuple else (index,))

    def _as_tensor(self, arr):
        import torch

        arr = np.asarray(arr)
        if any(s < 0 for s in arr.strides) or not arr.flags.writeable:
            arr = np.array(arr)  # torch takes no negative strides nor read-only memory
        return torch.from_numpy(arr).view(self.dtype)

    def _view_getitem(self, index):
        import torch

        shape, stride, offset = list(self.shape), self.stride, self._offset
        index = list(index)
        at = next((i for i, item in enumerate(index) if item is not None), None)
        first = index[at] if at is not None else Ellipsis
        if shape and (isinstance(first, slice) or _is_int(first)):
            # Read only the rows the index selects along the first axis.
            n = shape[0]
            if isinstance(first, slice):
                rows = range(*first.indices(n))
                if first.step is not None and first.step <= 0:
                    raise ValueError("step must be greater than zero")
                lo, hi = (rows[0], rows[-1] + 1) if len(rows) else (0, 0)
                index[at] = slice(0, hi - lo, rows.step)
            else:
                i = operator.index(first)
                if not -n <= i < n:
                    raise IndexError(f"index {i} is out of bounds for dimension 0 "
                                     f"with size {n}")
                lo = i % n
                hi = lo + 1
                index[at] = 0
            offset += lo * stride[0]
            shape[0] = hi - lo
        size = self.dtype.itemsize
        end = view_extent(offset, shape, stride)
        if self._bytes is None:
            self._bytes = _reshaped(self._storage, self.path, np.dtype(np.uint8),
                                    (self._storage.nbytes,), "C")
        data = self._bytes[offset * size:end * size] if end > offset else \
            np.empty(0, np.uint8)
        data = np.asarray(data)
        base = torch.from_numpy(data if data.flags.writeable else data.copy())
        view = base.view(self.dtype).as_strided(shape, stride, 0) if end > offset else \
            torch.empty(shape, dtype=self.dtype)
        result = view[tuple(index)]
        if result.numel() * size < base.numel():
            result = result.clone()  # not keep the bytes read around it
        return result


def _is_int(item):
    return (isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)))


def _rebuild(storage, name, offset, shape, stride, requires_grad, kind, device, path):
    from ..pickling.torch_dtypes import torch_dtypes

    return LazyTensor(storage, torch_dtypes()[name], name, offset, shape, stride,
                      requires_grad, kind, device, path)
