"""What a restricted load builds for each call a stream asks for.

A builder takes the stream's arguments, checks every one of them in Python
(types, sizes, the memory they cost, charged to the load's budget before
anything is made) and builds a value from them. Arrays are made here only,
as fresh copies of immutable bytes or zero-filled, never over an object the
stream can still change and never with uninitialised memory; no numpy
function is applied to lists the stream built; containers are filled item
by item, each key checked (:meth:`~.restricted.Machine.key`).

Each builder is ``builder(machine, func, args, kwargs, new)`` (``new``: the
stream asked for ``func.__new__(func, *args)``), registered against its
global in :mod:`.allowlist`.
"""

import collections
import datetime
import decimal
import fractions
import pickle
import re

import numpy as np

from ..exceptions import UntrustedObjectError
from .checks import (Refused, as_dtype, as_order, as_shape, brief, check_dtype,
                     check_plain, is_scalar, raw_extent)

#: Encodings a ``str``/``bytes`` call may name: looking up another imports a module.
_TEXT_ENCODINGS = frozenset(("utf-8", "utf8", "latin1", "latin-1", "ascii", "utf-16", "utf-32"))
_EXPONENT = re.compile(r"[eE]\s*([+-]?[0-9_]+)")
_STRING_DTYPE = getattr(np.dtypes, "StringDType", None)
#: Bytes a container charges per item (a list slot; a dict or set entry).
SLOT = 8
ENTRY = 32
#: Sequences a container may be built from, item by item.
_ITERABLES = (list, tuple, set, frozenset, range, collections.deque)


def bind(func, names, args, kwargs):
    """``{name: value}`` of a call's arguments; refuses unknown ones."""
    if len(args) > len(names):
        raise Refused(f"{brief(func)} called with {len(args)} arguments")
    bound = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names or key in bound:
            raise Refused(f"{brief(func)} called with argument {brief(key)}")
        bound[key] = value
    return bound


# -- Python values -------------------------------------------------------------


def _text_size(machine, text):
    if len(text) > 2 * machine.limits.max_digits + 64:
        machine.too_many_digits(len(text), "writes a number of {} characters")


def _number_text(machine, func, value):
    """The digits and the exponent a number written as text would expand to."""
    text = value.decode("latin-1") if not isinstance(value, str) else value
    _text_size(machine, text)
    match = _EXPONENT.search(text)
    if match and func is not decimal.Decimal:  # a Decimal keeps the exponent as is
        digits = match.group(1).lstrip("+-").replace("_", "").lstrip("0") or "0"
        if len(digits) > 18 or int(digits) > machine.limits.max_digits:
            machine.too_many_digits(int(digits[:18]), "writes a number of about {} digits")


def _number_arg(machine, func, value):
    kind = type(value)
    if kind is str or kind is bytes or kind is bytearray:
        _number_text(machine, func, value)
    elif kind is decimal.Decimal:
        if value.is_finite() and abs(value.adjusted()) > machine.limits.max_digits:
            machine.too_many_digits(abs(value.adjusted()),
                                    "writes a Decimal with an exponent of {}")
    elif kind is fractions.Fraction or kind is float or kind is bool or kind is int:
        pass
    elif kind is tuple and func is decimal.Decimal:  # (sign, digits, exponent)
        if len(value) != 3 or type(value[1]) is not tuple or not all(
                type(d) is int for d in value[1]) or not is_scalar(value[2]):
            raise Refused("Decimal of a tuple other than (sign, digits, exponent)")
        if len(value[1]) > machine.limits.max_digits:
            machine.too_many_digits(len(value[1]), "writes a Decimal of {} digits")
    elif value is not None:
        raise Refused(f"{brief(func)} of {brief(value)}")


def build_number(machine, func, args, kwargs, new):
    """``int``, ``float``, ``complex``, ``Fraction``, ``Decimal``, ``bool``."""
    for value in (*args, *kwargs.values()):
        _number_arg(machine, func, value)
    made = _invoke(func, args, kwargs, new)
    if type(made) is int:
        machine.check_int(made)
    elif type(made) is fractions.Fraction:
        machine.check_int(made.numerator)
        machine.check_int(made.denominator)
    return made


def build_text(machine, func, args, kwargs, new):
    """``bytes``, ``bytearray`` and ``str``: from text, bytes, a size or a
    list of byte values; sizes charged, codec names checked."""
    bound = bind(func, ("source", "encoding", "errors"), args, kwargs)
    encoding = bound.get("encoding")
    if encoding is not None and (type(encoding) is not str
                                 or encoding.lower().replace("_", "-") not in _TEXT_ENCODINGS):
        raise UntrustedObjectError("codecs", str(encoding)[:60], machine.source,
                                   reason="restricted loads decode text only as UTF-8, "
                                          "UTF-16, UTF-32, Latin-1 or ASCII")
    errors = bound.get("errors")
    if errors is not None and errors not in ("strict", "surrogatepass", "replace", "ignore"):
        raise Refused(f"text errors {brief(errors)}")
    source = bound.get("source")
    kind = type(source)
    if kind is int:
        if func is str:
            machine.check_int(source)
        else:
            if source < 0:
                raise Refused("a negative size")
            machine.alloc(source)
    elif kind in (str, bytes, bytearray, memoryview):
        machine.alloc(len(source) * (4 if kind is str or func is str else 1))
    elif kind is list or kind is tuple:
        if func is str or not all(type(n) is int for n in source):
            raise Refused(f"{brief(func)} of a {kind.__name__} of other than byte values")
        machine.alloc(len(source))
    elif source is not None and not (func is str and is_scalar(source)):
        raise Refused(f"{brief(func)} of {brief(source)}")
    return _invoke(func, args, kwargs, new)


def build_range(machine, func, args, kwargs, new):
    if not all(type(n) is int for n in args) or kwargs:
        raise Refused("a range of other than ints")
    for n in args:
        machine.check_int(n)
    made = _invoke(func, args, kwargs, new)
    if len(made) > machine.limits.max_objects:
        machine.too_many_objects(len(made), "asks for a range of {} items")
    return made


def build_scalars(machine, func, args, kwargs, new):
    """A call whose arguments are all plain scalars (``slice``, ``datetime``
    and the like: immutable values the C constructor checks)."""
    for value in (*args, *kwargs.values()):
        if not (is_scalar(value) or type(value) in _DATETIMES):
            raise Refused(f"{brief(func)} of {brief(value)}")
        if type(value) is int:
            machine.check_int(value)
        elif type(value) is str or type(value) is bytes:
            machine.alloc(len(value))
    return _invoke(func, args, kwargs, new)


#: Values a datetime call may take besides scalars (a timezone's offset, a tzinfo).
_DATETIMES = (datetime.date, datetime.datetime, datetime.time, datetime.timedelta, datetime.timezone)


def _items_of(machine, func, source):
    if source is None:
        return ()
    if not isinstance(source, _ITERABLES) and type(source) is not dict:
        raise Refused(f"{brief(func)} of {brief(source)}")
    if type(source) is range and len(source) > machine.limits.max_objects:
        machine.too_many_objects(len(source), "asks for a range of {} items")
    return source


def build_sequence(machine, func, args, kwargs, new):
    """``list``, ``tuple`` and ``deque`` of a sequence the stream made."""
    bound = bind(func, ("iterable", "maxlen") if func is collections.deque else ("iterable",),
                 args, kwargs)
    items = _items_of(machine, func, bound.get("iterable"))
    machine.alloc(SLOT * len(items))
    maxlen = bound.get("maxlen")
    if maxlen is not None and (type(maxlen) is not int or maxlen < 0):
        raise Refused(f"deque of maxlen {brief(maxlen)}")
    if func is tuple and not new:
        made = tuple(items)
        return machine.tuple_made(made)
    made = func.__new__(func) if new else func()
    if func is collections.deque:
        made = collections.deque(items, maxlen)
    elif items:
        made.extend(items)
    return machine.made_target(made)


def build_set(machine, func, args, kwargs, new):
    """``set`` and ``frozenset``: item by item, each item checked as a key."""
    bound = bind(func, ("iterable",), args, kwargs)
    items = _items_of(machine, func, bound.get("iterable"))
    machine.alloc(ENTRY * len(items))
    if func is frozenset and not new:
        made = set()
        for item in items:
            machine.key(made, item)
            made.add(item)
        return machine.tuple_made(frozenset(made))
    made = func.__new__(func) if new else func()
    for item in items:
        machine.key(made, item)
        made.add(item)
    return machine.made_target(made)


def build_mapping(machine, func, args, kwargs, new):
    """``dict``, ``OrderedDict``, ``Counter`` and ``defaultdict``: filled
    item by item, each key checked."""
    args = list(args)
    factory = None
    if func is collections.defaultdict:
        factory = args.pop(0) if args else None
        if factory is not None and factory not in _FACTORIES:
            raise Refused(f"a defaultdict whose factory is {brief(factory)}")
    if len(args) > 1:
        raise Refused(f"{brief(func)} called with {len(args)} arguments")
    made = func.__new__(func) if new else func() if factory is None else func(factory)
    if new and factory is not None:
        made.default_factory = factory
    source = args[0] if args else None
    if source is None:
        pairs = ()
    elif isinstance(source, dict):
        pairs = source.items()
    elif type(source) is list or type(source) is tuple:
        if not all(type(p) is tuple and len(p) == 2 for p in source):
            raise Refused(f"{brief(func)} of other than (key, value) pairs")
        pairs = source
    else:
        raise Refused(f"{brief(func)} of {brief(source)}")
    machine.alloc(ENTRY * (len(pairs) + len(kwargs)))
    fill = (made.update if func is collections.Counter else None)
    for key, value in (*pairs, *kwargs.items()):
        machine.key(made, key)
        if fill is not None:
            fill({key: value})
        else:
            made[key] = value
    return machine.made_target(made)


_FACTORIES = (list, dict, set, int, float, str, bytes, tuple, frozenset, bool, complex,
              collections.OrderedDict, collections.Counter, collections.deque)


def build_instance(machine, func, args, kwargs, new):
    """A class made empty and filled in by ``BUILD`` (``uuid.UUID``)."""
    if args or kwargs or not new:
        if func.__name__ == "UUID":
            bound = bind(func, ("hex", "bytes", "bytes_le", "fields", "int", "version",
                                "is_safe"), args, kwargs)
            for value in bound.values():
                check_plain(value, "a UUID's argument", depth=2)
            return _invoke(func, args, kwargs, False)
        raise Refused(f"{brief(func)} called with arguments")
    return machine.made_target(func.__new__(func))


def build_reconstructor(machine, func, args, kwargs, new):
    """``copyreg._reconstructor(cls, base, state)``: ``base.__new__(cls)``
    for ``object`` and the builtin containers (no array, dtype or numpy
    scalar class: those rebuild by their own entries)."""
    if len(args) != 3 or kwargs:
        raise Refused("copyreg._reconstructor takes (class, base, state)")
    cls, base, state = args
    if base not in _RECONSTRUCTOR_BASES or not isinstance(cls, type) or not issubclass(
            cls, base) or issubclass(cls, (np.ndarray, np.generic, np.dtype)):
        raise Refused(f"copyreg._reconstructor of {brief(cls)} from {brief(base)}")
    if base is object:
        if state is not None:
            raise Refused("copyreg._reconstructor from object with a state")
        made = object.__new__(cls)
    else:
        check = {dict: build_mapping, list: build_sequence, set: build_set}.get(base)
        if check is None:
            raise Refused(f"copyreg._reconstructor from {brief(base)}")
        made = check(machine, cls, () if state is None else (state,), {}, True)
    return machine.made_target(made)


_RECONSTRUCTOR_BASES = (object, dict, list, set)


def _invoke(func, args, kwargs, new):
    if new:
        return func.__new__(func, *args, **kwargs)
    return func(*args, **kwargs)


def build_encode(machine, func, args, kwargs, new):
    """``_codecs.encode(text, "latin1")``, as protocols 0-2 pickle bytes."""
    if args and type(args[0]) is str:
        machine.alloc(len(args[0]))
    return func(*args, **kwargs)


# -- numpy -------------------------------------------------------------------


def _array_class(cls, what):
    """``cls`` if it is an ndarray class whose instances rebuild as ndarray's
    (not a masked array, a memmap or MaskedConstant's singleton)."""
    ma = _numpy_ma()
    if not (isinstance(cls, type) and issubclass(cls, np.ndarray)) or issubclass(
            cls, np.memmap) or (ma is not None and issubclass(cls, ma.MaskedArray)):
        raise Refused(f"{what} of {brief(cls)}, not a plain ndarray class")
    return cls


def _numpy_ma():
    import sys

    return sys.modules.get("numpy.ma")


def fresh_array(machine, cls, shape, dtype, order="C"):
    """A zero-filled array (numpy's own empty one when it has no items)."""
    shape, count = as_shape(shape)
    machine.alloc(count * dtype.itemsize)
    if count == 0:
        return np.ndarray.__new__(cls, shape, dtype, order=order)
    arr = np.zeros(shape, dtype, order=order)
    return arr if cls is np.ndarray else arr.view(cls)


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
    view = np.ndarray(shape, dtype, data, offset, strides, order)
    arr = view.copy(order="K")
    return arr if cls is np.ndarray else arr.view(cls)


def build_ndarray(machine, cls, args, kwargs, new):
    bound = bind(cls, ("shape", "dtype", "buffer", "offset", "strides", "order"), args, kwargs)
    _array_class(cls, "ndarray")
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
    _array_class(cls, "_reconstruct")
    return machine.made_array(fresh_array(machine, cls, shape, as_dtype(dtype)))


def build_mareconstruct(machine, func, args, kwargs, new):
    """numpy.ma's ``_mareconstruct(cls, baseclass, shape, dtype)``: an empty
    masked array ``BUILD`` fills."""
    ma = _numpy_ma()
    if len(args) != 4 or kwargs or ma is None:
        raise Refused("_mareconstruct takes (class, base class, shape, dtype)")
    subtype, baseclass, shape, dtype = args
    if not (isinstance(subtype, type) and issubclass(subtype, ma.MaskedArray)) or issubclass(
            subtype, ma.core.MaskedConstant):
        raise Refused(f"_mareconstruct of {brief(subtype)}, not a masked array class")
    _array_class(baseclass, "_mareconstruct")
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
        na = getattr(dtype, "na_object", str)
        if type(dtype) is _STRING_DTYPE and not all(type(item) is str or item is na
                                                    for item in data):
            raise Refused("a string array of other items than strings")
    else:
        if type(data) is bytearray:
            data = bytes(data)
        if type(data) is not bytes or len(data) != count * dtype.itemsize:
            raise Refused(f"an array of {count * dtype.itemsize} bytes given "
                          f"{brief(data) if type(data) is not bytes else len(data)} bytes")
    return (version, shape, dtype, fortran, data)


def set_array_state(machine, arr, state):
    ma = _numpy_ma()
    if ma is not None and isinstance(arr, ma.MaskedArray):
        if type(state) is not tuple or len(state) != 7:
            raise Refused("a masked array's state is not of 7 items")
        version, shape, dtype, fortran, data, mask, fill = state
        version, shape, dtype, fortran, data = array_state(
            machine, arr, (version, shape, dtype, fortran, data))
        _, _, _, _, mask = array_state(
            machine, arr, (version, shape, ma.make_mask_descr(dtype), fortran, mask))
        _fill_value(fill)
        state = (version, shape, dtype, fortran, data, mask, fill)
    else:
        state = array_state(machine, arr, state)
    try:
        arr.__setstate__(state)
    except (TypeError, ValueError, KeyError, IndexError, OverflowError,
            RuntimeError) as exc:
        raise Refused(f"bad array state: {exc}") from None


def _fill_value(value):
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
    arr = np.frombuffer(data, dtype, count).reshape(shape, order=as_order(order)).copy("K")
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
        return check_dtype(_invoke(cls, args, kwargs, new))
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
    return _invoke(cls, args, kwargs, new)


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
    return _invoke(cls, args, kwargs, new)


def _array_arg(machine, func, value):
    if not isinstance(value, np.ndarray) or value.dtype.hasobject:
        raise Refused(f"{brief(func)} of {brief(value)}; restricted loads apply numpy "
                      f"functions to arrays only")
    return value


def build_asfortranarray(machine, func, args, kwargs, new):
    if len(args) != 1 or kwargs:
        raise Refused("asfortranarray takes one array")
    arr = _array_arg(machine, func, args[0])
    if machine.dry:
        return arr
    machine.alloc(0 if machine.is_stored(arr) else arr.nbytes)
    return np.asfortranarray(arr)


def build_matrix(machine, func, args, kwargs, new):
    bound = bind(func, ("data", "dtype", "copy"), args, kwargs)
    arr = _array_arg(machine, func, bound.get("data"))
    dtype = as_dtype(bound["dtype"]) if bound.get("dtype") is not None else None
    machine.alloc(arr.nbytes)
    return np.matrix(arr, dtype, copy=True)


def build_masked_constant(machine, func, args, kwargs, new):
    """``MaskedConstant()``: numpy's ``np.ma.masked`` singleton (never a
    target of ``BUILD``)."""
    if args or kwargs:
        raise Refused("MaskedConstant takes no argument")
    return func()


# -- cpersist's own ----------------------------------------------------------------


def build_stored(machine, func, args, kwargs, new):
    """``stored_array(section)``: the array of a section of the container."""
    if len(args) != 1 or kwargs:
        raise Refused("stored_array takes a section number")
    return machine.stored(func(*args))


def build_inline(machine, func, args, kwargs, new):
    """``inline_array(data, dtype, shape, order)``: copied from its bytes."""
    bound = bind(func, ("data", "dtype", "shape", "order"), args, kwargs)
    if type(bound.get("data")) not in (bytes, bytearray):
        raise Refused("an inline array's data is not bytes")
    dtype = as_dtype(bound.get("dtype"))
    shape, count = as_shape(bound.get("shape"))
    machine.alloc(count * dtype.itemsize)
    return func(bytes(bound["data"]) if type(bound["data"]) is bytearray else bound["data"],
                dtype, shape, as_order(bound.get("order")))


def _state_dict(value, what):
    if value is not None and (type(value) is not dict
                              or not all(type(k) is str for k in value)):
        raise Refused(f"{what} is not a dict of names")
    return value


def build_view(machine, func, args, kwargs, new):
    """``rebuild_view(base, cls, state)``: an ndarray subclass viewing ``base``."""
    bound = bind(func, ("base", "cls", "state"), args, kwargs)
    _array_arg(machine, func, bound.get("base"))
    _array_class(bound.get("cls"), "rebuild_view")
    _state_dict(bound.get("state"), "a view's attributes")
    return func(bound["base"], bound["cls"], bound.get("state"))


def build_masked(machine, func, args, kwargs, new):
    """``rebuild_masked(cls, data, mask, fill_value, hard_mask)``."""
    bound = bind(func, ("cls", "data", "mask", "fill_value", "hard_mask"), args, kwargs)
    ma = _numpy_ma()
    cls = bound.get("cls")
    if ma is None or not (isinstance(cls, type) and issubclass(cls, ma.MaskedArray)) or (
            issubclass(cls, ma.core.MaskedConstant)):
        raise Refused(f"rebuild_masked of {brief(cls)}, not a masked array class")
    data = _array_arg(machine, func, bound.get("data"))
    mask = bound.get("mask")
    if mask is not ma.nomask:
        _array_arg(machine, func, mask)
        if mask.shape != data.shape:
            raise Refused("a mask of another shape than its data")
    _fill_value(bound.get("fill_value"))
    if type(bound.get("hard_mask")) is not bool:
        raise Refused("hard_mask is not a bool")
    return func(cls, data, mask, bound.get("fill_value"), bound["hard_mask"])


def build_tensor(machine, func, args, kwargs, new):
    """``rebuild_tensor(storage, ...)``: a tensor over a stored storage only."""
    if not args or not machine.is_stored(args[0]):
        raise Refused("a tensor whose storage is not an array of a section")
    if machine.dry:  # checked as rebuild_tensor would, without importing torch
        from .torch_dtypes import check_view_args, itemsize_by_name, view_extent

        if len(args) != 9 or kwargs:
            raise Refused("rebuild_tensor takes 9 arguments")
        dtype, offset, shape, stride, requires_grad, kind, state, device = args[1:9]
        itemsize = itemsize_by_name(dtype) if type(dtype) is str else None
        if itemsize is None or type(requires_grad) is not bool:
            raise Refused(f"a tensor of dtype {brief(dtype)}")
        try:
            check_view_args(offset, shape, stride, kind, state, device)
        except pickle.UnpicklingError as exc:
            raise Refused(str(exc)) from None
        if view_extent(offset, shape, stride) * itemsize > args[0].nbytes:
            raise Refused("a tensor view reaching past its storage")
        return None
    return func(*args, **kwargs)


# -- torch ---------------------------------------------------------------------


def build_torch_size(machine, func, args, kwargs, new):
    if kwargs or len(args) > 1 or (args and (type(args[0]) not in (tuple, list) or not all(
            type(n) is int and 0 <= n < 1 << 63 for n in args[0]))):
        raise Refused("torch.Size of other than a tuple of sizes")
    return func(*args)


def build_torch_device(machine, func, args, kwargs, new):
    if kwargs or not 1 <= len(args) <= 2 or type(args[0]) is not str or len(args[0]) > 64 or (
            len(args) == 2 and args[1] is not None and type(args[1]) is not int):
        raise Refused("torch.device of other than a name and an index")
    try:
        return func(*args)
    except (RuntimeError, ValueError) as exc:
        raise Refused(f"bad torch.device: {exc}") from None

