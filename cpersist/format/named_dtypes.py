"""The dtypes of ml_dtypes (bfloat16, the float8, float6 and float4
families, the small integers), stored under their names.

numpy's ``.npy`` descriptor cannot say these types: it writes bfloat16 as
``'<V2'``, most float8 types as ``'<V1'`` and float8_e5m2 as ``'<f1'``,
which numpy cannot read back. An array of one of them is described in the
index by the ``repr`` of the type's name (``"'bfloat16'"``) and, inside a
pickle stream, by the name itself.

Only the names in :data:`ITEMSIZES` are ever looked up, and only in the
``ml_dtypes`` module: a file cannot make a load import anything else. This
module imports neither numpy nor ml_dtypes: a dump finds ml_dtypes already
imported (an array of its types exists), and a load imports it only for an
array that needs it.
"""

import sys

from ..exceptions import DtypeLibraryError

#: The ml_dtypes types stored by name, and their item sizes in bytes (the
#: sub-byte types take a byte per item in numpy).
ITEMSIZES = {
    "bfloat16": 2,
    "float8_e3m4": 1, "float8_e4m3": 1, "float8_e4m3b11fnuz": 1, "float8_e4m3fn": 1,
    "float8_e4m3fnuz": 1, "float8_e5m2": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "float6_e2m3fn": 1, "float6_e3m2fn": 1, "float4_e2m1fn": 1,
    "int1": 1, "int2": 1, "int4": 1, "uint1": 1, "uint2": 1, "uint4": 1,
    "complex32": 4, "bcomplex32": 4,
}
#: Names whose arrays are compressed favouring speed, as torch's bfloat16
#: tensors are (see :data:`cpersist.pickling.tensors.FAVOUR_SPEED`).
FAVOUR_SPEED = frozenset({"bfloat16"})
#: The index's text for each name (the ``repr`` of the name) -> the name.
BY_TEXT = {repr(name): name for name in ITEMSIZES}
#: numpy numbers the types it does not define from 256 (NPY_USERDEF) on.
FIRST_USER_TYPE = 256

_RESOLVED = {}


def name_of(dtype):
    """The name ``dtype`` is stored under, or None if it is not an ml_dtypes
    type of :data:`ITEMSIZES` in little-endian byte order (the name says
    no byte order: files hold these types little-endian)."""
    if dtype.num < FIRST_USER_TYPE:  # one of numpy's own: the common case, at once
        return None
    scalar = dtype.type
    name = getattr(scalar, "__name__", None)
    if (getattr(scalar, "__module__", None) != "ml_dtypes" or name not in ITEMSIZES
            or dtype.itemsize != ITEMSIZES[name]
            or not dtype.isnative or dtype.itemsize > 1 and sys.byteorder != "little"
            or getattr(sys.modules.get("ml_dtypes"), name, None) is not scalar):
        return None
    return name


def favours_speed(dtype):
    """Whether arrays of ``dtype`` are compressed by the codec's faster form."""
    return name_of(dtype) in FAVOUR_SPEED


def resolve(name):
    """The numpy dtype of the ml_dtypes type ``name`` (one of
    :data:`ITEMSIZES`), importing ml_dtypes.

    Raises
    ------
    DtypeLibraryError
        If ml_dtypes is not installed, or lacks the type.
    KeyError
        If ``name`` is not in the table.
    """
    dtype = _RESOLVED.get(name)
    if dtype is not None:
        return dtype
    itemsize = ITEMSIZES[name]
    try:
        import ml_dtypes
    except ImportError:
        raise DtypeLibraryError(
            f"the file holds arrays of ml_dtypes.{name}, which need the ml_dtypes "
            f"package: pip install ml_dtypes") from None
    import numpy as np

    scalar = getattr(ml_dtypes, name, None)
    if not (isinstance(scalar, type) and issubclass(scalar, np.generic)
            and np.dtype(scalar).itemsize == itemsize):
        version = getattr(ml_dtypes, "__version__", "?")
        raise DtypeLibraryError(
            f"the file holds arrays of ml_dtypes.{name}, which ml_dtypes {version} does "
            f"not have: pip install --upgrade ml_dtypes")
    dtype = _RESOLVED[name] = np.dtype(scalar)
    return dtype
