"""The functions a cpersist pickle stream calls to rebuild its arrays.

Each is pickled under its literal name from :mod:`cpersist.format.names`,
not under this module's name: :func:`_format_name` sets ``__module__`` and
``__qualname__`` from the literal, so moving a function cannot change what
files name. The C pickler checks that the name resolves back to the same
object, so the module the literal names (:mod:`cpersist.pickler`) imports them.
"""

import pickle
import warnings
import weakref

import numpy as np

from ..format import names
from .arrays import inline_dtype_of
from .brief import brief
from .jax_arrays import assemble, bad_jax, check_placement, to_jax
from .torch_dtypes import bad_tensor, check_view, import_torch, view_extent


def _format_name(literal):
    """Make the decorated function pickle as the global ``literal``."""
    module, attr = names.split(literal)

    def decorate(func):
        func.__module__ = module
        func.__qualname__ = func.__name__ = attr
        return func

    return decorate


@_format_name(names.STORED_ARRAY)
def stored_array(index):
    """Placeholder resolved by the unpickler of :func:`cpersist.load`; never called by it.

    A cpersist pickle stream calls this to fetch the array kept in section
    ``index``; outside :func:`cpersist.load` there is no file to fetch it from.
    """
    raise pickle.UnpicklingError(
        "this pickle stream comes from a cpersist file: open it with cpersist.load()"
    )


#: Looked up once: :func:`inline_array` runs for each of a model's small arrays.
_DTYPE, _NDARRAY = np.dtype, np.ndarray


@_format_name(names.INLINE_ARRAY)
def inline_array(data, dtype, shape, order):
    """Rebuild a small array stored inside the pickle stream (by
    :func:`.arrays.to_inline`), refusing arguments that do not agree.

    It views a bytearray ``data`` (the unpickler's, made for it alone), as
    numpy's unpickling does, or a writable memoryview (its part of a
    buffer block, :mod:`.buffer_blocks`), and copies bytes or a read-only
    memoryview, to be writable. Called for
    each of a model's hundreds of small arrays: numpy checks what it checks
    anyway (the shape's items are integers, the bytes are enough), and the
    shape it made is compared with the one given, which numpy takes more
    loosely (a -1 it works out from the bytes).
    """
    try:
        kind = type(data)
        if kind is memoryview:
            if data.ndim != 1 or data.format != "B":
                raise ValueError(f"a buffer of {data.ndim} dimensions of {data.format!r}")
            kind = bytes if data.readonly else bytearray
        elif kind is not bytearray and kind is not bytes:
            raise ValueError(f"data of {type(data).__name__}")
        if order != "C" and order != "F":
            raise ValueError(f"data in order {brief(order)}")
        if not isinstance(dtype, _DTYPE):
            dtype = inline_dtype_of(dtype)
        if dtype.hasobject:  # numpy would read pointers from the bytes
            raise ValueError("an object dtype cannot be stored as raw bytes")
        if type(shape) is not tuple:
            shape = tuple(shape) if type(shape) is list else (shape,)
        try:
            arr = _NDARRAY(shape, dtype, data, 0, None, order)
        except (TypeError, ValueError) as exc:  # not integers, too few bytes...
            raise ValueError(f"{len(data)} bytes for {dtype} {brief(shape)} ({exc})") from None
        if arr.shape != shape or arr.nbytes != len(data):
            raise ValueError(f"{len(data)} bytes for {dtype} {brief(shape)}")
        return arr if kind is bytearray else arr.copy(order)
    except (TypeError, ValueError) as exc:
        raise pickle.UnpicklingError(f"bad inline array: {exc}") from None


@_format_name(names.REBUILD_VIEW)
def rebuild_view(base, cls, state):
    """Rebuild an ndarray subclass (e.g. ``np.matrix``) as a view of ``base``."""
    if not (isinstance(cls, type) and issubclass(cls, np.ndarray)):
        raise pickle.UnpicklingError(f"{brief(cls)} is not an ndarray subclass")
    arr = base.view(cls)
    if state:
        arr.__dict__.update(state)
    return arr


@_format_name(names.REBUILD_MASKED)
def rebuild_masked(cls, data, mask, fill_value, hard_mask):
    """Rebuild a masked array from its stored data and mask."""
    if not (isinstance(cls, type) and issubclass(cls, np.ma.MaskedArray)):
        raise pickle.UnpicklingError(f"{brief(cls)} is not a MaskedArray subclass")
    arr = np.ma.MaskedArray(data, mask=mask, copy=False, hard_mask=hard_mask).view(cls)
    if mask is not np.ma.nomask:
        arr._mask = mask  # keep the stored mask object (and its memmap) as is
    if fill_value is not None:
        arr.fill_value = fill_value
    return arr


def check_tensor(stored, data, dtype, offset, shape, stride, requires_grad, kind, state,
                 device):
    """torch's dtype of the tensor :func:`rebuild_tensor`'s arguments describe,
    once they are checked: ``stored`` says whether ``data`` is a stored array
    (an ndarray here; a lazy load passes its lazy arrays, see
    :mod:`cpersist.lazy.rebuild`), which must be 1-d and hold the view."""
    tdtype = check_view(dtype, offset, shape, stride, kind, state, device)
    if type(requires_grad) is not bool:
        bad_tensor(f"requires_grad {brief(requires_grad)}")
    if not stored or data.ndim != 1:
        bad_tensor("its storage is not a stored array")
    if view_extent(offset, shape, stride) * tdtype.itemsize > data.nbytes:
        bad_tensor(f"the view {shape} (strides {stride}, offset {offset}) reaches past its "
                   f"storage of {data.nbytes} bytes")
    return tdtype


@_format_name(names.REBUILD_TENSOR)
def rebuild_tensor(data, dtype, offset, shape, stride, requires_grad, kind, state, device):
    """Rebuild a torch tensor as a view of a stored storage (stored by :mod:`cpersist.pickling.tensors`).

    ``data`` is the storage's bytes as a 1-d array (a memory map of the
    file with ``mmap_mode``); ``dtype`` torch's name of the tensor's
    dtype; ``offset``, ``shape``, ``stride`` the view, in elements;
    ``kind`` ``"tensor"`` or ``"parameter"`` (``nn.Parameter``); ``state``
    the tensor's ``__dict__`` or None; ``device`` where it was when dumped
    (None for the CPU). The tensor comes back on the CPU.
    """
    tdtype = check_tensor(isinstance(data, np.ndarray), data, dtype, offset, shape, stride,
                          requires_grad, kind, state, device)
    torch = import_torch()
    tensor = _empty(torch, tdtype).set_(storage_of(data), offset, shape, stride)
    try:
        if kind == "parameter":
            tensor = torch.nn.Parameter(tensor, requires_grad=requires_grad)
        elif requires_grad:
            tensor.requires_grad_(True)
    except RuntimeError as exc:  # requires_grad on an integer dtype
        bad_tensor(str(exc))
    if state:
        tensor.__dict__.update(state)
    return tensor


@_format_name(names.REBUILD_JAX)
def rebuild_jax(data, placement):
    """Rebuild a JAX array (stored by :mod:`cpersist.pickling.jax_arrays`).

    ``data`` is the array's data as a numpy array and ``placement`` None, or
    for an array sharded over several devices, a tuple of its shards' data
    and a dict saying where each shard sits and, for a ``NamedSharding``,
    the mesh and partition spec (see :func:`.jax_arrays.check_placement`).
    The array comes back with that sharding where this process has the
    devices its mesh needs, else on the default device.
    """
    if placement is None:
        if not isinstance(data, np.ndarray):
            bad_jax("its data is not a stored array")
        return to_jax(data, None)
    if type(data) is not tuple or not all(isinstance(shard, np.ndarray) for shard in data):
        bad_jax("its shards are not stored arrays")
    return to_jax(data, placement)


def rebuild_jax_numpy(data, placement):
    """:func:`rebuild_jax` for ``cpersist.load(..., jax_as_numpy=True)``:
    the array's data as a numpy array, jax left unimported."""
    if placement is None:
        if not isinstance(data, np.ndarray):
            bad_jax("its data is not a stored array")
        return data
    if type(data) is not tuple or not all(isinstance(shard, np.ndarray) for shard in data):
        bad_jax("its shards are not stored arrays")
    shape, indices = check_placement(data, placement)
    return assemble(data, shape, indices)


def _empty(torch, dtype):
    if dtype is torch.complex32:
        with warnings.catch_warnings():  # "ComplexHalf support is experimental"
            warnings.simplefilter("ignore", UserWarning)
            return torch.empty(0, dtype=dtype)
    return torch.empty(0, dtype=dtype)


def storage_of(data):
    """The torch storage sharing the memory of the 1-d array ``data``.

    A read-only map made by ``mmap_mode='r'`` is private (see
    :func:`cpersist.pickling.read.load_source`): the tensor may write to it, and its writes
    stay in the process, as with ``torch.load(mmap=True)``. Any other
    read-only buffer (``cpersist.loads`` of ``bytes``) is copied.
    """
    if data.flags.writeable:
        return import_torch().from_numpy(data.view(np.uint8)).untyped_storage()
    view = data.view(np.ndarray).view(np.uint8)
    try:
        view.flags.writeable = True  # allowed only if the memory is writable
        return import_torch().from_numpy(view).untyped_storage()
    except ValueError:
        pass
    # One copy per array, whatever number of tensors view it (the unpickler
    # passes them the same array), so that they still share a storage.
    hit = _COPIES.get(id(data))
    if hit is not None and hit[0]() is data:
        return hit[1]
    storage = import_torch().from_numpy(view.copy()).untyped_storage()
    _COPIES[id(data)] = (weakref.ref(data), storage)
    weakref.finalize(data, _COPIES.pop, id(data), None)
    return storage


#: id(read-only array) -> (weak reference to it, the storage copied from it).
_COPIES = {}


#: ``(module, name)`` -> function, for unpicklers resolving the format's
#: names without importing the module they spell.
BY_NAME = {(func.__module__, func.__qualname__): func
           for func in (stored_array, inline_array, rebuild_view, rebuild_masked,
                         rebuild_tensor, rebuild_jax)}
