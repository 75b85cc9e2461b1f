"""The globals a restricted load resolves, each with the builder of its calls.

One table, :data:`ALLOWED`: ``(module, name) -> builder``. A builder
(:mod:`.builders`) checks a call's arguments and builds its value; the
:data:`VALUE` entries may be named (as a dtype's type, a class handed to a
rebuild function, a torch dtype) but never called. Nothing here imports,
opens or runs code a stream chooses; a name outside the table is refused
before anything is imported, unless the caller trusts it (``trusted=``).
Globals the caller trusts are called as they are (:data:`TRUSTED`).

To let a new global through, add its row with a builder that checks every
argument in Python and builds a fresh value.
"""

import numpy as np

from . import array_builders as a
from . import builders as b
from . import format_builders as f
from ..format import names
from ..format.named_dtypes import ITEMSIZES

#: Marks an entry that may be named but not called.
VALUE = "value"
#: Marks a global the caller trusts: called as is, its result filled in by
#: ``BUILD``, ``SETITEM`` and ``APPEND`` as the stream asks.
TRUSTED = "trusted"

#: torch's dtypes and quantization schemes, which ``torch.load(weights_only=True)``
#: resolves as values (its ``_weights_only_unpickler``).
_TORCH_VALUES = (
    "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "bfloat16", "complex32", "complex64", "complex128",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
    "float4_e2m1fn_x2", "bits1x8", "bits2x4", "bits4x2", "bits8", "bits16",
    "qint8", "quint8", "qint32", "quint4x2", "quint2x4",
    *(f"uint{n}" for n in range(1, 8)), *(f"int{n}" for n in range(1, 8)),
    "per_tensor_affine", "per_tensor_symmetric", "per_channel_affine",
    "per_channel_symmetric", "per_channel_affine_float_qparams",
)


def _table():
    rows = {}

    def add(modules, names_, builder):
        for module in (modules,) if isinstance(modules, str) else modules:
            for name in (names_,) if isinstance(names_, str) else names_:
                rows[module, name] = builder

    add("builtins", ("bool", "int", "float", "complex"), b.build_number)
    add("builtins", ("bytes", "bytearray", "str"), b.build_text)
    add("builtins", ("list", "tuple"), b.build_sequence)
    add("builtins", ("set", "frozenset"), b.build_set)
    add("builtins", "dict", b.build_mapping)
    add("builtins", "range", b.build_range)
    add("builtins", "slice", b.build_scalars)
    add("builtins", ("Ellipsis", "NotImplemented"), VALUE)  # constants, as in an index
    add("collections", ("OrderedDict", "defaultdict", "Counter"), b.build_mapping)
    add("collections", "deque", b.build_sequence)
    add("datetime", ("date", "datetime", "time", "timedelta", "timezone"), b.build_scalars)
    add("decimal", "Decimal", b.build_number)
    add("fractions", "Fraction", b.build_number)
    add("uuid", "UUID", b.build_instance)
    add("copyreg", "_reconstructor", b.build_reconstructor)
    add("_codecs", "encode", b.build_encode)

    multiarray = ("numpy", "numpy.core.multiarray", "numpy._core.multiarray")
    add(multiarray, "ndarray", a.build_ndarray)
    add(multiarray, "dtype", a.build_dtype)
    add(multiarray, "_reconstruct", a.build_reconstruct)
    add(multiarray, "scalar", a.build_scalar)
    add(("numpy.core.numeric", "numpy._core.numeric"), "_frombuffer", a.build_frombuffer)
    add(("numpy.core._internal", "numpy._core._internal"),
        "_convert_to_stringdtype_kwargs", a.build_stringdtype)
    # numpy >= 2 sets MaskedArray.__module__ to "numpy.ma", so pickle names it so.
    add(("numpy.ma.core", "numpy.ma"), "MaskedArray", VALUE)
    add("numpy.ma.core", "_mareconstruct", a.build_mareconstruct)
    add("numpy.ma.core", "MaskedConstant", a.build_masked_constant)
    # The max codec may store a Fortran-ordered array in C order and rebuild
    # it with this (see ArrayPickler's fortran_as_c).
    add("numpy", "asfortranarray", a.build_asfortranarray)
    add(("numpy", "numpy.matrixlib.defmatrix"), "matrix", a.build_matrix)
    add(("numpy", "numpy.rec"), "recarray", a.build_recarray)
    add(("numpy", "numpy.rec"), "record", a.build_void)
    add("numpy.dtypes", [n for n in dir(np.dtypes) if n.endswith("DType")], a.build_dtype)
    add("numpy", [t.__name__ for t in np.sctypeDict.values()], a.build_numpy_scalar)
    add("numpy", "void", a.build_void)
    # ml_dtypes' types as numpy's own pickles name them (a dtype's type:
    # ``numpy.dtype(ml_dtypes.bfloat16)``): values, and only those of the
    # table of named dtypes.
    add("ml_dtypes", list(ITEMSIZES), VALUE)
    # Not numpy.memmap: called through REDUCE it creates or truncates any file
    # (memmaps are stored as plain arrays, so no cpersist file needs it).

    add(*names.split(names.INLINE_ARRAY), f.build_inline)
    add(*names.split(names.REBUILD_VIEW), f.build_view)
    add(*names.split(names.REBUILD_MASKED), f.build_masked)
    add(*names.split(names.REBUILD_TENSOR), f.build_tensor)
    add(*names.split(names.REBUILD_JAX), f.build_jax)

    add("torch", "Size", f.build_torch_size)
    add("torch", "device", f.build_torch_device)
    add("torch", _TORCH_VALUES, VALUE)
    return rows


#: ``(module, name) -> builder`` (or :data:`VALUE`) of every global a
#: restricted load resolves without being told to trust it.
ALLOWED = _table()
