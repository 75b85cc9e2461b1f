"""What a restricted load lets a stream call, and the check each call gets:
arrays made over raw bytes only with a dtype holding no Python objects,
dtypes rebuilt by numpy from a plain description and checked, sizes bounded
by :class:`~cpersist.Limits` (see :mod:`.restricted`).
"""

import copyreg
import decimal
import fractions
import operator
import re
import sys

import numpy as np

from ..exceptions import UntrustedObjectError
from .limits import exceeded

try:  # numpy >= 2
    from numpy._core.multiarray import _reconstruct, scalar
    from numpy._core.numeric import _frombuffer
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core.multiarray import _reconstruct, scalar
    from numpy.core.numeric import _frombuffer

#: Encodings a ``str``/``bytes`` call may name: looking up another imports a module.
_TEXT_ENCODINGS = frozenset(("utf-8", "utf8", "latin1", "latin-1", "ascii", "utf-16", "utf-32"))
_EXPONENT = re.compile(r"[eE]\s*([+-]?[0-9_]+)")
#: numpy's dtype flags that say an item holds Python objects
#: (NPY_ITEM_REFCOUNT, NPY_LIST_PICKLE).
_OBJECT_FLAGS = 0x01 | 0x02


class Refused(Exception):
    """A forged numpy description: the message says what is wrong (raised
    to the caller as :class:`~cpersist.CorruptFileError`)."""


def check_dtype(dtype, depth=0):
    """Raise :class:`Refused` unless ``dtype`` is one numpy builds from its
    plain description: fields inside the item, object fields where numpy
    puts them, the flags numpy gives it."""
    if type(dtype) is not np.dtype and not isinstance(dtype, np.dtype):
        raise Refused(f"{type(dtype).__name__} given where a dtype is needed")
    if depth > 32:
        raise Refused("a dtype nested more than 32 deep")
    holds_objects = dtype.char == "O"
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        check_dtype(base, depth + 1)
        count = 1
        for n in shape:
            count *= n
        if base.itemsize * count != dtype.itemsize:
            raise Refused(f"a subarray dtype of {dtype.itemsize} bytes for {count} items "
                          f"of {base.itemsize}")
        holds_objects = base.hasobject
        expected = np.dtype((base, shape))
    elif dtype.names is not None:
        names, formats, offsets, titles = [], [], [], []
        for name in dtype.names:
            field = dtype.fields[name]
            sub, offset = field[0], field[1]
            check_dtype(sub, depth + 1)
            if not 0 <= offset <= dtype.itemsize - sub.itemsize:
                raise Refused(f"field {name!r} at offset {offset} of {sub.itemsize} bytes "
                              f"outside an item of {dtype.itemsize}")
            holds_objects = holds_objects or sub.hasobject
            names.append(name)
            formats.append(sub)
            offsets.append(offset)
            titles.append(field[2] if len(field) > 2 else None)
        # numpy checks the layout again (overlapping and misaligned object fields).
        try:
            expected = np.dtype({"names": names, "formats": formats, "offsets": offsets,
                                 "titles": titles, "itemsize": dtype.itemsize},
                                align=dtype.isalignedstruct)
        except (TypeError, ValueError) as exc:
            raise Refused(f"a structured dtype numpy refuses: {exc}") from None
    else:
        try:
            expected = np.dtype(dtype.str)
        except TypeError as exc:
            raise Refused(f"dtype {dtype.str!r}: {exc}") from None
    if bool(dtype.flags & _OBJECT_FLAGS) != holds_objects or dtype.hasobject != holds_objects:
        raise Refused(f"a dtype whose flags ({dtype.flags}) do not say whether it holds "
                      f"Python objects")
    if (expected.flags != dtype.flags or expected.itemsize != dtype.itemsize
            or expected != dtype):
        raise Refused(f"a dtype unlike the one numpy builds from its description "
                      f"{expected!r}")
    return dtype


def _as_dtype(value):
    """A numpy dtype from a stream's description of one, checked."""
    if not isinstance(value, np.dtype):
        try:
            value = np.dtype(value)
        except (TypeError, ValueError, SyntaxError, KeyError) as exc:
            raise Refused(f"bad dtype {value!r:.80}: {exc}") from None
    return check_dtype(value)


def _count(shape):
    if shape is None:
        return 0
    try:
        dims = (operator.index(shape),)
    except TypeError:
        try:
            dims = tuple(operator.index(n) for n in shape)
        except TypeError:
            return 0  # numpy refuses it
    count = 1
    for n in dims:
        count *= max(n, 0)
    return count


def _bind(names, args, kwargs):
    bound = dict(zip(names, args))
    for key, value in kwargs.items():
        bound[key] = value
    return bound


def _invoke(func, args, kwargs, new):
    if new:
        return func.__new__(func, *args, **kwargs)
    return func(*args, **kwargs)


def _ndarray(machine, cls, args, kwargs, new):
    bound = _bind(("shape", "dtype", "buffer", "offset", "strides", "order"), args, kwargs)
    dtype = _as_dtype(bound.get("dtype", float))
    if bound.get("buffer") is not None:
        if dtype.hasobject:
            raise Refused("an array of Python objects over raw bytes")
    else:
        machine.alloc(_count(bound.get("shape")) * dtype.itemsize)
    return machine.fresh(_invoke(cls, args, kwargs, new))


def _recarray(machine, cls, args, kwargs, new):
    bound = _bind(("shape", "dtype", "buf", "offset", "strides", "formats", "names",
                   "titles", "byteorder", "aligned", "order"), args, kwargs)
    if bound.get("dtype") is not None:
        dtype = _as_dtype(bound["dtype"])
    else:
        try:
            dtype = np.rec.format_parser(bound.get("formats"), bound.get("names"),
                                         bound.get("titles"), bound.get("aligned", False),
                                         bound.get("byteorder")).dtype
        except (TypeError, ValueError, KeyError, SyntaxError) as exc:
            raise Refused(f"bad record format: {exc}") from None
        check_dtype(dtype)
    if bound.get("buf") is not None:
        if dtype.hasobject:
            raise Refused("an array of Python objects over raw bytes")
    else:
        machine.alloc(_count(bound.get("shape")) * dtype.itemsize)
    return machine.fresh(_invoke(cls, args, kwargs, new))


def _reconstruct_checked(machine, func, args, kwargs, new):
    if len(args) != 3 or kwargs:
        raise Refused("_reconstruct takes (class, shape, dtype)")
    cls, shape, dtype = args
    if not (isinstance(cls, type) and issubclass(cls, np.ndarray)):
        raise Refused(f"_reconstruct of {cls!r:.80}, not an ndarray class")
    machine.alloc(_count(shape) * _as_dtype(dtype).itemsize)
    return machine.fresh(func(*args))


def _mareconstruct_checked(machine, func, args, kwargs, new):
    if len(args) != 4 or kwargs:
        raise Refused("_mareconstruct takes (class, base class, shape, dtype)")
    subtype, baseclass, shape, dtype = args
    for cls in (subtype, baseclass):
        if not (isinstance(cls, type) and issubclass(cls, np.ndarray)):
            raise Refused(f"_mareconstruct of {cls!r:.80}, not an ndarray class")
    machine.alloc(2 * _count(shape) * _as_dtype(dtype).itemsize)
    return machine.fresh(func(*args))


def _dtype(machine, cls, args, kwargs, new):
    if cls is not np.dtype:  # numpy.dtypes.Float64DType() and the like
        return check_dtype(_invoke(cls, args, kwargs, new))
    bound = _bind(("obj", "align", "copy"), args, kwargs)
    if set(bound) - {"obj", "align", "copy", "metadata"} or "obj" not in bound:
        raise Refused(f"numpy.dtype called with {sorted(bound)}")
    extra = {"metadata": bound["metadata"]} if bound.get("metadata") is not None else {}
    try:
        # Always a new dtype: BUILD may then set its state, never numpy's own.
        made = np.dtype(bound["obj"], bool(bound.get("align", False)), True, **extra)
    except (TypeError, ValueError, SyntaxError, KeyError) as exc:
        raise Refused(f"bad dtype {bound['obj']!r:.80}: {exc}") from None
    check_dtype(made)
    machine.new_dtypes[id(made)] = made
    return made


def _void(machine, cls, args, kwargs, new):
    bound = _bind(("value", "dtype"), args, kwargs)
    if bound.get("dtype") is not None:
        dtype = _as_dtype(bound["dtype"])
        if dtype.hasobject:
            raise Refused("a numpy scalar of Python objects over raw bytes")
        machine.alloc(dtype.itemsize)
    if isinstance(bound.get("value"), int):
        machine.alloc(bound["value"])
    return _invoke(cls, args, kwargs, new)


def _dtype_first(machine, func, args, kwargs, new):
    """``scalar(dtype, data)`` and ``_frombuffer(buffer, dtype, shape, order)``."""
    if args:
        dtype = _as_dtype(args[1] if func is _frombuffer and len(args) > 1 else args[0])
        if func is scalar:
            machine.alloc(dtype.itemsize)
    return _invoke(func, args, kwargs, new)


def _range(machine, func, args, kwargs, new):
    """A range longer than ``max_objects``: anything expanding it (``list``,
    ``bytes``, numpy, nested in a list) would make that many objects."""
    made = _invoke(func, args, kwargs, new)
    if _range_len(made) > machine.limits.max_objects:
        raise exceeded("max_objects", _range_len(made), machine.limits, machine.source,
                       "asks for a range of {} items")
    return made


def _reconstructor(machine, func, args, kwargs, new):
    if len(args) == 3 and isinstance(args[1], type):
        cls, base, state = args
        if issubclass(base, np.dtype):
            raise Refused("copyreg._reconstructor of a dtype")
        if issubclass(base, (np.ndarray, np.generic)):
            checker = _ndarray if issubclass(base, np.ndarray) else _void
            if not (isinstance(cls, type) and issubclass(cls, base)):
                raise Refused(f"copyreg._reconstructor of {cls!r:.80} from {base!r:.80}")
            made = checker(machine, cls, () if state is None else (state,), {}, True)
            return made
    return _invoke(func, args, kwargs, new)


def _sized_text(machine, func, args, kwargs, new):
    """``bytes``, ``bytearray`` and ``str``: sizes and codec names."""
    bound = _bind(("source", "encoding", "errors"), args, kwargs)
    encoding = bound.get("encoding")
    if encoding is not None and (type(encoding) is not str
                                 or encoding.lower().replace("_", "-") not in _TEXT_ENCODINGS):
        raise UntrustedObjectError("codecs", str(encoding), machine.source,
                                   reason="restricted loads decode text only as UTF-8, "
                                          "UTF-16, UTF-32, Latin-1 or ASCII")
    source = bound.get("source")
    if func is not str and type(source) is int:
        machine.alloc(source)
    return _invoke(func, args, kwargs, new)


def _number(machine, func, args, kwargs, new):
    """``int``, ``Fraction`` and ``Decimal`` from text or a Decimal: the digits
    and the exponent they would expand to."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, (str, bytes, bytearray)):
            text = value.decode("latin-1") if not isinstance(value, str) else value
            if len(text) > 2 * machine.limits.max_digits + 64:
                raise exceeded("max_digits", len(text), machine.limits, machine.source,
                               "writes a number of {} characters")
            match = _EXPONENT.search(text)
            if match and func is not decimal.Decimal:  # a Decimal keeps the exponent as is
                digits = match.group(1).lstrip("+-").replace("_", "").lstrip("0") or "0"
                if len(digits) > 18 or int(digits) > machine.limits.max_digits:
                    raise exceeded("max_digits", int(digits[:18]), machine.limits,
                                   machine.source, "writes a number of about {} digits")
    return _invoke(func, args, kwargs, new)


#: Callables whose calls (``REDUCE``, ``NEWOBJ``, ``OBJ``, ``INST``) are
#: checked: ``callable -> checker(machine, callable, args, kwargs, new)``;
#: a class's checker also serves its subclasses. ``new``: the stream asked
#: for ``cls.__new__(cls, *args)``.
CHECKED_CALLS = {
    np.ndarray: _ndarray, np.recarray: _recarray, np.dtype: _dtype,
    np.void: _void, np.record: _void,
    _reconstruct: _reconstruct_checked, _frombuffer: _dtype_first, scalar: _dtype_first,
    copyreg._reconstructor: _reconstructor,
    bytes: _sized_text, bytearray: _sized_text, str: _sized_text, range: _range,
    int: _number, fractions.Fraction: _number, decimal.Decimal: _number,
}
CHECKED_CALLS.update({cls: _dtype for cls in vars(np.dtypes).values()
                      if isinstance(cls, type) and issubclass(cls, np.dtype)})


def _checker(func):
    """The checker of calls to ``func``, or None."""
    if _MARECONSTRUCT[0] is None and "numpy.ma" in sys.modules:
        _register_ma()
    try:
        checker = CHECKED_CALLS.get(func)
    except TypeError:  # an unhashable callable: no checker
        return None
    if checker is None and isinstance(func, type):
        for klass in func.__mro__[1:]:
            checker = CHECKED_CALLS.get(klass)
            if checker is not None:
                # A subclass with a constructor of its own (np.matrix,
                # MaskedArray, MaskedConstant's singleton) takes no raw buffer.
                return checker if func.__new__ is klass.__new__ else None
    return checker


_MARECONSTRUCT = [None]


def _register_ma():
    """``numpy.ma``'s rebuild function, once something imported numpy.ma
    (importing it for every load would cost each one)."""
    _MARECONSTRUCT[0] = sys.modules["numpy.ma"].core._mareconstruct
    CHECKED_CALLS[_MARECONSTRUCT[0]] = _mareconstruct_checked


def _range_len(value):
    return max(0, (value.stop - value.start + value.step - (1 if value.step > 0 else -1))
               // value.step)
