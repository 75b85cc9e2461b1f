"""torch dtypes by name and the numpy dtypes their storages are kept in, and
the checks of a stored tensor view's arguments (a forged stream gives
anything). torch is imported on first use only.
"""

import pickle

import numpy as np

from .brief import brief

#: torch dtypes numpy has, by torch's name.
_NUMPY_TWINS = {
    "bool": "?", "uint8": "u1", "int8": "i1", "int16": "i2", "uint16": "u2", "int32": "i4",
    "uint32": "u4", "int64": "i8", "uint64": "u8", "float16": "f2", "float32": "f4",
    "float64": "f8", "complex64": "c8", "complex128": "c16",
}
#: Tensor kinds :func:`rebuild_tensor` makes.
KINDS = ("tensor", "parameter")


def import_torch():
    import torch

    return torch


_DTYPES = None


def torch_dtypes():
    """``{name: torch.dtype}`` of every dtype whose tensors are stored as
    arrays (not the quantized ones: their tensors keep torch's pickling)."""
    global _DTYPES
    if _DTYPES is None:
        torch = import_torch()
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


def bad_tensor(message):
    raise pickle.UnpicklingError(f"bad tensor: {message}")


def check_view(dtype, offset, shape, stride, kind, state, device):
    """Validate :func:`rebuild_tensor`'s arguments (a forged stream gives
    anything); return the torch dtype."""
    tdtype = torch_dtypes().get(dtype) if type(dtype) is str else None
    if tdtype is None:
        bad_tensor(f"unknown dtype {brief(dtype)}")
    check_view_args(offset, shape, stride, kind, state, device)
    return tdtype


#: The names of the torch dtypes whose tensors are stored as arrays.
STORED_NAMES = frozenset((
    "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "bfloat16", "complex32", "complex64", "complex128",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
    "float4_e2m1fn_x2", "bits1x8", "bits2x4", "bits4x2", "bits8", "bits16",
    *(f"uint{n}" for n in range(1, 8)), *(f"int{n}" for n in range(1, 8))))


def itemsize_by_name(name):
    """The item size of torch dtype ``name``, without importing torch (None
    for a name torch stores no tensor of)."""
    if name not in STORED_NAMES:
        return None
    digits = name[len(name.rstrip("0123456789")):]
    return {"16": 2, "32": 4, "64": 8, "128": 16}.get(digits, 1)


def check_view_args(offset, shape, stride, kind, state, device):
    """Validate :func:`rebuild_tensor`'s view arguments."""
    if type(offset) is not int or offset < 0:
        bad_tensor(f"storage offset {brief(offset)}")
    if (type(shape) is not tuple or type(stride) is not tuple or len(shape) != len(stride)
            or not all(type(n) is int and n >= 0 for n in shape)
            or not all(type(s) is int and s >= 0 for s in stride)):
        bad_tensor(f"shape {brief(shape)} with strides {brief(stride)}")
    numel = 1
    for n in shape:
        numel *= n
    if numel >= 1 << 63:  # torch counts elements in 64 bits
        bad_tensor(f"shape {brief(shape)} of more elements than torch can count")
    if kind not in KINDS:
        bad_tensor(f"kind {brief(kind)}")
    if state is not None and (type(state) is not dict or not all(type(k) is str for k in state)):
        bad_tensor("its attributes are not a dict of names")
    if device is not None and type(device) is not str:
        bad_tensor(f"device {brief(device)}")


def view_extent(offset, shape, stride):
    """One past the last storage element the view reaches (``offset`` if empty)."""
    if 0 in shape:
        return offset
    return offset + sum((n - 1) * s for n, s in zip(shape, stride)) + 1
