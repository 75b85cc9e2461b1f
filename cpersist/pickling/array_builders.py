"""What a restricted load builds for numpy's globals (see :mod:`.builders`):
arrays as fresh copies of immutable bytes or zero-filled, checked dtypes,
numpy scalars of plain values, and the states ``BUILD`` gives them.
"""

import sys

import numpy as np

from .builders import SLOT, bind, invoke
from ..format.named_dtypes import FIRST_USER_TYPE
from .checks import (Refused, as_dtype, as_order, as_shape, brief, check_dtype, check_plain,
                     is_scalar, raw_extent)

_STRING_DTYPE = getattr(np.dtypes, "StringDType", None)



def array_class(cls, what):
    """``cls`` if it is an ndarray class whose instances rebuild as ndarray's
    (not a masked array, a memmap or MaskedConstant's singleton)."""
    ma = numpy_ma()
    if not (isinstance(cls, type) and issubclass(cls, np.ndarray)) or issubclass(
            cls, np.memmap) or (ma is not None and issubclass(cls, ma.MaskedArray)):
        raise Refused(f"{what} of {brief(cls)}, not a plain ndarray class")
    return cls


def numpy_ma():
    """``numpy.ma`` if anything imported it (a stream naming it does)."""
    return sys.modules.get("numpy.ma")


def fresh_array(machine, cls, shape, dtype, order="C"):
    """A zero-filled array (numpy's own empty one when it has no items)."""
    shape, count = as_shape(shape)
    machine.alloc(count * dtype.itemsize)
    if count == 0:
        return np.ndarray.__new__(cls, shape, dtype, order=order)
    arr = np.zeros(shape, dtype, order=order)
    return arr if cls is np.ndarray else arr.view(cls)


def whole_items(arr):
    """``arr`` viewed as items of raw bytes: numpy copies a structured
    array field by field, leaving the bytes between fields (padding) as
    uninitialised as its new memory; raw items are copied whole."""
    return arr.view(np.dtype((np.void, arr.dtype.itemsize))) if arr.dtype.itemsize else arr


def fresh_copy(view):
    """A copy of ``view`` that owns its memory, byte for byte, in its order;
    an empty one keeps its strides (numpy's copy of an empty array has zero
    strides, a trusted load's view of it the shape's)."""
    if view.size:
        made = np.empty_like(view, order="K")  # every byte written just below
        whole_items(made)[...] = whole_items(view)
        return made
    return np.ndarray(view.shape, view.dtype, bytearray(), 0, view.strides)


def raw_array(machine, cls, shape, dtype, buffer, offset, strides, order):
    """An ndarray (or subclass) as ``ndarray(shape, dtype, buffer, offset,
    strides, order)`` would view it, as a fresh copy."""
    shape, count = as_shape(shape)
    order = as_order(order)
    if buffer is None:
        if strides is not None or offset not in (None, 0):
            raise Refused("an array of strides or offset without a buffer")
        return fresh_array(machine, cls, shape, dtype, order)
    if dtype.hasobject:
        raise Refused("an array of Python objects over raw bytes")
    if type(buffer) not in (bytes, bytearray, memoryview):
        raise Refused(f"an array over {brief(buffer)}")
    data = buffer if type(buffer) is bytes else bytes(buffer)  # the stream may change it
    machine.alloc(len(data) if data is not buffer else 0)
    offset = 0 if offset is None else offset
    if type(offset) is not int or not 0 <= offset <= len(data):
        raise Refused(f"an offset of {brief(offset)} in a buffer of {len(data)} bytes")
    if strides is None:
        if offset + count * dtype.itemsize > len(data):
            raise Refused(f"an array of {count * dtype.itemsize} bytes at {offset} in a "
                          f"buffer of {len(data)}")
    else:
        strides, _ = (tuple(strides), None) if type(strides) in (tuple, list) else (None, None)
        if strides is None or len(strides) != len(shape) or not all(
                type(s) is int for s in strides):
            raise Refused("bad strides")
        extent = raw_extent(shape, strides, dtype.itemsize, offset)
        if extent is not None and (extent[0] < 0 or extent[1] > len(data)):
            raise Refused("strides reaching outside the buffer")
    machine.alloc(count * dtype.itemsize)
    arr = fresh_copy(np.ndarray(shape, dtype, data, offset, strides, order))
    return arr if cls is np.ndarray else arr.view(cls)


def build_ndarray(machine, cls, args, kwargs, new):
    bound = bind(cls, ("shape", "dtype", "buffer", "offset", "strides", "order"), args, kwargs)
    array_class(cls, "ndarray")
    dtype = as_dtype(bound.get("dtype", float))
    return machine.made_array(raw_array(machine, cls, bound.get("shape"), dtype,
                                        bound.get("buffer"), bound.get("offset"),
                                        bound.get("strides"), bound.get("order")))


def build_recarray(machine, cls, args, kwargs, new):
    bound = bind(cls, ("shape", "dtype", "buf", "offset", "strides", "formats", "names",
                       "titles", "byteorder", "aligned", "order"), args, kwargs)
    if bound.get("dtype") is not None:
        dtype = as_dtype(bound["dtype"])
    else:
        for key in ("formats", "names", "titles", "byteorder", "aligned"):
            check_plain(bound.get(key), "a record format")
        try:
            dtype = np.rec.format_parser(bound.get("formats"), bound.get("names"),
                                         bound.get("titles"), bound.get("aligned", False),
                                         bound.get("byteorder")).dtype
        except (TypeError, ValueError, KeyError, SyntaxError) as exc:
            raise Refused(f"bad record format: {exc}") from None
        check_dtype(dtype)
    dtype = np.dtype((np.record, dtype)) if dtype.names is not None else dtype
    return machine.made_array(raw_array(machine, np.recarray, bound.get("shape"), dtype,
                                        bound.get("buf"), bound.get("offset"),
                                        bound.get("strides"), bound.get("order")))


def build_reconstruct(machine, func, args, kwargs, new):
    """numpy's ``_reconstruct(cls, shape, dtype)``: an array ``BUILD`` fills."""
    if len(args) != 3 or kwargs:
        raise Refused("_reconstruct takes (class, shape, dtype)")
    cls, shape, dtype = args
    array_class(cls, "_reconstruct")
    return machine.made_array(fresh_array(machine, cls, shape, as_dtype(dtype)))


def build_mareconstruct(machine, func, args, kwargs, new):
    """numpy.ma's ``_mareconstruct(cls, baseclass, shape, dtype)``: an empty
    masked array ``BUILD`` fills."""
    ma = numpy_ma()
    if len(args) != 4 or kwargs or ma is None:
        raise Refused("_mareconstruct takes (class, base class, shape, dtype)")
    subtype, baseclass, shape, dtype = args
    if not (isinstance(subtype, type) and issubclass(subtype, ma.MaskedArray)) or issubclass(
            subtype, ma.core.MaskedConstant):
        raise Refused(f"_mareconstruct of {brief(subtype)}, not a masked array class")
    array_class(baseclass, "_mareconstruct")
    dtype = as_dtype(dtype)
    data = fresh_array(machine, baseclass, shape, dtype)
    mask = fresh_array(machine, np.ndarray, shape, ma.make_mask_descr(dtype))
    return machine.made_array(subtype.__new__(subtype, data, mask=mask, dtype=dtype))


def array_state(machine, arr, state):
    """``state`` of ndarray's ``__setstate__`` for ``arr``, checked:
    ``(version, shape, dtype, is_fortran, data)`` with data of exactly the
    size the shape gives (bytes, or a list of the items for object and
    string dtypes)."""
    if type(state) is not tuple or len(state) not in (4, 5):
        raise Refused("an array's state is not (version, shape, dtype, fortran, data)")
    version = state[0] if len(state) == 5 else 1
    shape, dtype, fortran, data = state[-4:]
    if type(version) is not int:
        raise Refused("an array state's version is not an int")
    shape, count = as_shape(shape)
    dtype = check_dtype(dtype)
    if type(fortran) not in (bool, int):
        raise Refused("an array state's order is not a bool")
    if dtype.hasobject:
        if type(data) is not list or len(data) != count:
            raise Refused(f"an array of {count} objects with {brief(data)} as items")
        machine.alloc(SLOT * count)
        if type(dtype) is _STRING_DTYPE and not all(
                type(item) is str or _is_na(item, dtype) for item in data):
            raise Refused("a string array of other items than strings")
    else:
        if type(data) is bytearray:
            data = bytes(data)
        if type(data) is not bytes or len(data) != count * dtype.itemsize:
            raise Refused(f"an array of {count * dtype.itemsize} bytes given "
                          f"{brief(data) if type(data) is not bytes else len(data)} bytes")
    return (version, shape, dtype, fortran, data)


def _is_na(item, dtype):
    """Whether ``item`` is a StringDType's NA value: that object, or a
    scalar of its type equal to it (NaN to NaN), as pickling copies it."""
    na = getattr(dtype, "na_object", _NO_NA)
    if item is na:
        return True
    return type(item) is type(na) and is_scalar(item) and (
        item == na or (item != item and na != na))


_NO_NA = object()


def set_array_state(machine, arr, state):
    ma = numpy_ma()
    if ma is not None and isinstance(arr, ma.MaskedArray):
        if type(state) is not tuple or len(state) != 7:
            raise Refused("a masked array's state is not of 7 items")
        version, shape, dtype, fortran, data, mask, fill = state
        version, shape, dtype, fortran, data = array_state(
            machine, arr, (version, shape, dtype, fortran, data))
        _, _, _, _, mask = array_state(
            machine, arr, (version, shape, ma.make_mask_descr(dtype), fortran, mask))
        fill_value(fill)
        state = (version, shape, dtype, fortran, data, mask, fill)
    else:
        state = array_state(machine, arr, state)
    try:
        arr.__setstate__(state)
    except (TypeError, ValueError, KeyError, IndexError, OverflowError,
            RuntimeError) as exc:
        raise Refused(f"bad array state: {exc}") from None


def fill_value(value):
    """A masked array's fill value: plain, or an array (numpy keeps it as a
    0-d array) made by this load, which numpy copies."""
    if not isinstance(value, np.ndarray):
        check_plain(value, "a masked array's fill value", depth=3)


def build_frombuffer(machine, func, args, kwargs, new):
    """numpy's ``_frombuffer(buffer, dtype, shape, order)`` (protocol 5),
    copied; read-only when the buffer was."""
    if len(args) != 4 or kwargs:
        raise Refused("_frombuffer takes (buffer, dtype, shape, order)")
    buffer, dtype, shape, order = args
    dtype = as_dtype(dtype)
    shape, count = as_shape(shape)
    if type(buffer) not in (bytes, bytearray, memoryview) or dtype.hasobject:
        raise Refused(f"_frombuffer of {brief(buffer)}")
    data = bytes(buffer) if type(buffer) is not bytes else buffer
    if len(data) != count * dtype.itemsize:
        raise Refused(f"_frombuffer of {len(data)} bytes for {count} items of {dtype}")
    machine.alloc(2 * len(data))
    arr = fresh_copy(np.frombuffer(data, dtype, count).reshape(shape, order=as_order(order)))
    if type(buffer) is bytes or (type(buffer) is memoryview and buffer.readonly):
        arr.flags.writeable = False
    return arr


def build_scalar(machine, func, args, kwargs, new):
    """numpy's ``scalar(dtype, data)``: a numpy scalar from its bytes."""
    if len(args) not in (1, 2) or kwargs:
        raise Refused("scalar takes (dtype, data)")
    dtype = check_dtype(args[0])
    data = args[1] if len(args) == 2 else None
    if dtype.hasobject:
        if dtype.char != "O":
            raise Refused("a numpy scalar of an object-holding structure")
        return data  # numpy gives the object itself
    if type(data) is not bytes or len(data) != dtype.itemsize:
        raise Refused(f"a numpy scalar of {dtype.itemsize} bytes from {brief(data)}")
    machine.alloc(dtype.itemsize)
    return func(dtype, data)


def build_dtype(machine, cls, args, kwargs, new):
    """``numpy.dtype(obj, align, copy)``: always a new dtype, which ``BUILD``
    may then give a state; never numpy's own."""
    if cls is not np.dtype:  # numpy.dtypes.Float64DType() and the like
        if args or any(k not in ("na_object", "coerce") for k in kwargs):
            raise Refused(f"{brief(cls)} called with arguments")
        for value in kwargs.values():
            check_plain(value, "a dtype's argument", depth=1)
        return check_dtype(invoke(cls, args, kwargs, new))
    bound = bind(cls, ("obj", "align", "copy", "metadata"), args, kwargs)
    if "obj" not in bound:
        raise Refused("numpy.dtype called without a description")
    check_plain(bound["obj"], "a dtype's description")
    metadata = bound.get("metadata")
    if metadata is not None:
        if type(metadata) is not dict:
            raise Refused("a dtype's metadata is not a dict")
        check_plain(metadata, "a dtype's metadata")
    extra = {"metadata": metadata} if metadata is not None else {}
    try:
        made = np.dtype(bound["obj"], bool(bound.get("align", False)), True, **extra)
    except (TypeError, ValueError, SyntaxError, KeyError, RecursionError) as exc:
        raise Refused(f"bad dtype {brief(bound['obj'])}: {exc}") from None
    if made.num >= FIRST_USER_TYPE:
        # numpy gives back its one instance of a type it does not define
        # (ml_dtypes'), copy or not: a BUILD would change it for the process.
        made = made.newbyteorder("=")
    if made is np.dtype(made.type):
        raise Refused(f"numpy's own instance of {made} where a new dtype is made")
    check_dtype(made)
    return machine.made_dtype(made)


def build_stringdtype(machine, func, args, kwargs, new):
    """numpy's ``_convert_to_stringdtype_kwargs(coerce, na_object)``."""
    bound = bind(func, ("coerce", "na_object"), args, kwargs)
    if bound.get("coerce", True) not in (True, False) or type(bound.get("coerce", True)) not in (
            bool, int):
        raise Refused("a StringDType's coerce is not a bool")
    if "na_object" in bound and not is_scalar(bound["na_object"]):
        raise Refused(f"a StringDType's NA value {brief(bound['na_object'])}")
    return check_dtype(func(*args, **kwargs))


def build_void(machine, cls, args, kwargs, new):
    """``numpy.void(value, dtype)``: from bytes, a size (zero bytes) or plain items."""
    bound = bind(cls, ("value", "dtype"), args, kwargs)
    value = bound.get("value")
    if bound.get("dtype") is not None:
        dtype = as_dtype(bound["dtype"])
        if dtype.hasobject:
            raise Refused("a numpy scalar of Python objects over raw bytes")
        machine.alloc(dtype.itemsize)
        check_plain(value, "a numpy scalar's value", depth=4)
    elif type(value) is int:
        if value < 0:
            raise Refused("a negative size")
        machine.alloc(value)
    elif type(value) not in (bytes, bytearray):
        raise Refused(f"numpy.void of {brief(value)}")
    return invoke(cls, args, kwargs, new)


def build_numpy_scalar(machine, cls, args, kwargs, new):
    """``numpy.float64(1.5)`` and the like: of plain scalars only (numpy
    would make an array of a list)."""
    if len(args) > 2 or kwargs:
        raise Refused(f"{brief(cls)} called with {len(args)} arguments")
    for value in args:
        if not is_scalar(value):
            raise Refused(f"{brief(cls)} of {brief(value)}")
        if type(value) is int:
            machine.check_int(value)
        elif type(value) in (str, bytes):
            machine.alloc(4 * len(value))
    if issubclass(cls, np.void) or cls is np.object_:
        raise Refused(f"{brief(cls)} called")
    return invoke(cls, args, kwargs, new)


def array_arg(machine, func, value):
    if not isinstance(value, np.ndarray) or value.dtype.hasobject:
        raise Refused(f"{brief(func)} of {brief(value)}; restricted loads apply numpy "
                      f"functions to arrays only")
    return value


def _asked(machine, func, data, dtype):
    """Charge what numpy would allocate for ``data`` as ``dtype`` (before
    refusing a non-array: a scalar of a vast subarray dtype costs it all),
    then check that ``data`` is an array."""
    dtype = as_dtype(dtype) if dtype is not None else None
    if dtype is not None:
        machine.alloc((data.size if isinstance(data, np.ndarray) else 1) * dtype.itemsize)
    return array_arg(machine, func, data), dtype


def build_asfortranarray(machine, func, args, kwargs, new):
    bound = bind(func, ("a", "dtype"), args, kwargs)
    arr, dtype = _asked(machine, func, bound.get("a"), bound.get("dtype"))
    if machine.dry:
        return arr
    if dtype is None or dtype == arr.dtype:
        machine.alloc(0 if machine.is_stored(arr) else arr.nbytes)
        if arr.flags.f_contiguous:
            return np.asfortranarray(arr)  # itself, as numpy gives it
        made = np.empty(arr.shape, arr.dtype, order="F")  # every byte written just below
        whole_items(made)[...] = whole_items(arr)
        return made
    made = np.zeros(arr.shape, dtype, order="F")  # a conversion fills fields only
    np.copyto(made, arr, casting="unsafe")
    return made


def build_matrix(machine, func, args, kwargs, new):
    bound = bind(func, ("data", "dtype", "copy"), args, kwargs)
    arr, dtype = _asked(machine, func, bound.get("data"), bound.get("dtype"))
    if dtype is None:
        machine.alloc(arr.nbytes)
    return np.matrix(arr, dtype, copy=True)


def build_masked_constant(machine, func, args, kwargs, new):
    """``MaskedConstant()``: numpy's ``np.ma.masked`` singleton (never a
    target of ``BUILD``)."""
    if args or kwargs:
        raise Refused("MaskedConstant takes no argument")
    return func()
