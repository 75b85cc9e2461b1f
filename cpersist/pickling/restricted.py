"""The restricted load: a pickle machine that checks what it builds.

``trusted=False`` (or an allowlist) loads with :class:`Machine` instead of
the C unpickler. It reads opcodes with :mod:`cpersist.stream.args` (as the
C unpickler reads them) and executes them itself, so that every step a
stream asks for is decided here:

* Globals are resolved by the unpickler's ``find_class`` (the allowlist);
  copyreg extension codes and persistent ids are refused.
* A call goes through a checker when its callable builds arrays, dtypes or
  large objects (:data:`CHECKED_CALLS`): an array is made over raw bytes only
  with a dtype holding no Python objects, every dtype is rebuilt by numpy
  from a plain description and checked (its fields inside its items, its
  flags those numpy gives it), and sizes are bounded by :class:`Limits`.
* ``BUILD`` and the container opcodes cannot change an object the stream
  did not make: no class, function, module, global, shared dtype or array.
* :class:`~cpersist.Limits` bound the opcodes, objects, digits and memory.

To let a new callable through with a check, add it to :data:`CHECKED_CALLS`
(``callable -> checker(machine, func, args, kwargs, new)``).
"""

import copyreg
import decimal
import fractions
import operator
import re
import sys
import types

import numpy as np

from .._runtime.gc import collector_paused
from ..exceptions import CorruptFileError, CpersistError, UntrustedObjectError
from ..stream.args import NAMES, StreamError, next_frame_end, read_in_frame
from ..stream.args import _READERS as _READS_ARGUMENT
from .limits import exceeded

try:  # numpy >= 2
    from numpy._core.multiarray import _reconstruct, scalar
    from numpy._core.numeric import _frombuffer
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core.multiarray import _reconstruct, scalar
    from numpy.core.numeric import _frombuffer

#: Objects a stream may not change with BUILD, SETITEM, APPEND or ADDITEMS.
_SHARED_KINDS = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
                 types.MethodType, types.MethodWrapperType, types.WrapperDescriptorType,
                 types.MethodDescriptorType, classmethod, staticmethod, property,
                 np.dtype, np.generic)
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


class Machine:
    """Executes one pickle stream under the restricted load's checks.

    Parameters
    ----------
    data : bytes
    find_class : callable
        ``find_class(module, name)``: the allowlist.
    persistent_load : callable
    limits : cpersist.Limits
    source : str
    """

    def __init__(self, data, find_class, persistent_load, limits, source):
        self.data = data
        self._find_class = find_class
        self._persistent_load = persistent_load
        self.limits = limits
        self.source = source
        self.new_dtypes = {}  # id -> dtype made here and not yet given a state
        self._fresh = {}      # id -> array made here and not yet given a state
        self._resolved = {}   # id -> (object, "module.name") of each global
        self._objects = 0
        self._alloc = 0
        self._max_int_bits = int(limits.max_digits * 3.33) + 8
        self.stack = []
        self.marks = []
        self.memo = {}

    # -- bookkeeping ---------------------------------------------------
    def alloc(self, nbytes):
        if nbytes > self.limits.max_alloc_bytes:
            raise exceeded("max_alloc_bytes", nbytes, self.limits, self.source,
                           "asks one call to allocate {} bytes")

    def fresh(self, arr):
        self._fresh[id(arr)] = arr
        return arr

    def _made(self):
        self._objects += 1
        if self._objects > self.limits.max_objects:
            raise exceeded("max_objects", self._objects, self.limits, self.source,
                           "builds at least {} objects")

    def _check_int(self, value):
        if value.bit_length() > self._max_int_bits:
            raise exceeded("max_digits", int(value.bit_length() / 3.33), self.limits,
                           self.source, "writes an integer of about {} digits")

    def _shared(self, target, action):
        """Refuse to change ``target`` unless the stream made it."""
        resolved = self._resolved.get(id(target))
        if resolved is not None and resolved[0] is target:
            module, _, name = resolved[1].rpartition(".")
        elif isinstance(target, _SHARED_KINDS):
            module = getattr(target, "__module__", None) or type(target).__module__
            name = getattr(target, "__qualname__", None) or type(target).__qualname__
        else:
            return
        raise UntrustedObjectError(
            str(module), str(name), self.source,
            reason=f"the pickle stream tried to change it ({action}); restricted loads "
                   f"only fill in objects the stream made",
            remedy="load it with trusted=True only if you trust this file")

    # -- stack ------------------------------------------------------------
    def _fence(self):
        return self.marks[-1] if self.marks else 0

    def _pop(self):
        if len(self.stack) <= self._fence():
            raise StreamError("unpickling stack underflow")
        return self.stack.pop()

    def _top(self):
        if len(self.stack) <= self._fence():
            raise StreamError("unpickling stack underflow")
        return self.stack[-1]

    def _pop_mark(self):
        if not self.marks:
            raise StreamError("could not find MARK")
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def _pop_n(self, n):
        start = len(self.stack) - n
        if start < self._fence():
            raise StreamError("unpickling stack underflow")
        items = tuple(self.stack[start:])
        del self.stack[start:]
        return items

    # -- calls --------------------------------------------------------------
    def call(self, func, args, kwargs=None, new=False):
        self._made()
        for value in args:  # (a range is checked where it is made)
            if type(value) is decimal.Decimal and value.is_finite() and abs(
                    value.adjusted()) > self.limits.max_digits:
                raise exceeded("max_digits", abs(value.adjusted()), self.limits, self.source,
                               "writes a Decimal with an exponent of {}")
        kwargs = kwargs or {}
        checker = _checker(func)
        if checker is not None:
            return checker(self, func, args, kwargs, new)
        return _invoke(func, args, kwargs, new)

    def _instantiate(self, cls, args):
        if not args and isinstance(cls, type) and not hasattr(cls, "__getinitargs__"):
            return self.call(cls, (), None, new=True)
        return self.call(cls, tuple(args))

    def _global(self, module, name):
        obj = self._find_class(module, name)
        self._resolved[id(obj)] = (obj, f"{module}.{name}")
        return obj

    # -- the run ------------------------------------------------------------
    def run(self):
        data = self.data
        end = len(data)
        pos = 0
        opcodes = 0
        max_opcodes = self.limits.max_opcodes
        stack = self.stack
        push = stack.append
        handlers = _HANDLERS
        no_arg = _NO_ARG
        frame_end = 0
        while True:
            if pos >= end:
                raise StreamError("pickle data was truncated")
            opcodes += 1
            if opcodes > max_opcodes:
                raise exceeded("max_opcodes", opcodes, self.limits, self.source,
                               "runs at least {} opcodes")
            handler = no_arg[data[pos]]
            if handler is not None:  # one byte: nothing to read, no frame to cross
                pos += 1
                handler(self, None)
                continue
            name, arg, pos = read_in_frame(data, pos, frame_end)
            if name == "FRAME":
                frame_end = next_frame_end(frame_end, pos, arg)
            handler = handlers.get(name)
            if handler is not None:
                handler(self, arg)
            elif name == "STOP":
                return self._pop()
            else:  # a literal
                if name in _INTS and type(arg) is int:
                    self._check_int(arg)
                push(arg)

    # -- opcodes ------------------------------------------------------------
    def op_mark(self, arg):
        self.marks.append(len(self.stack))

    def op_pop(self, arg):
        if self.marks and self.marks[-1] == len(self.stack):
            self.marks.pop()
        else:
            self._pop()

    def op_pop_mark(self, arg):
        self._pop_mark()

    def op_dup(self, arg):
        self.stack.append(self._top())

    def op_const(value):
        def push(self, arg):
            self.stack.append(value)
        return push

    def op_empty(kind):
        def push(self, arg):
            self._made()
            self.stack.append(kind())
        return push

    def op_persid(self, arg):
        self.stack.append(self._persistent_load(arg))

    def op_binpersid(self, arg):
        self.stack.append(self._persistent_load(self._pop()))

    def op_reduce(self, arg):
        args = self._pop()
        func = self._top()
        if type(args) is not tuple:
            raise StreamError("argument list must be a tuple")
        self.stack[-1] = self.call(func, args)

    def op_newobj(self, arg):
        args = self._pop()
        cls = self._pop()
        if not isinstance(cls, type):
            raise StreamError("NEWOBJ class argument isn't a type object")
        if type(args) is not tuple:
            raise StreamError("NEWOBJ expected an arg tuple.")
        self.stack.append(self.call(cls, args, None, new=True))

    def op_newobj_ex(self, arg):
        kwargs = self._pop()
        args = self._pop()
        cls = self._pop()
        if not isinstance(cls, type):
            raise StreamError("NEWOBJ_EX class argument must be a type")
        if type(args) is not tuple or type(kwargs) is not dict:
            raise StreamError("NEWOBJ_EX args and kwargs must be a tuple and a dict")
        self.stack.append(self.call(cls, args, kwargs, new=True))

    def op_global(self, arg):
        module, _, name = arg.partition(" ")
        self.stack.append(self._global(module, name))

    def op_stack_global(self, arg):
        name = self._pop()
        module = self._pop()
        if type(name) is not str or type(module) is not str:
            raise StreamError("STACK_GLOBAL requires str")
        self.stack.append(self._global(module, name))

    def op_inst(self, arg):
        module, _, name = arg.partition(" ")
        cls = self._global(module, name)
        self.stack.append(self._instantiate(cls, self._pop_mark()))

    def op_obj(self, arg):
        items = self._pop_mark()
        if not items:
            raise StreamError("unpickling stack underflow")
        self.stack.append(self._instantiate(items[0], items[1:]))

    def op_list(self, arg):
        self._made()
        self.stack.append(self._pop_mark())

    def op_tuple(self, arg):
        self._made()
        self.stack.append(tuple(self._pop_mark()))

    def op_tuple_n(n):
        def build(self, arg):
            self._made()
            self.stack.append(self._pop_n(n))
        return build

    def op_dict(self, arg):
        items = self._pop_mark()
        if len(items) % 2:
            raise StreamError("odd number of items for DICT")
        self._made()
        self.stack.append(dict(zip(items[0::2], items[1::2])))

    def op_frozenset(self, arg):
        self._made()
        self.stack.append(frozenset(self._pop_mark()))

    def op_get(self, arg):
        try:
            self.stack.append(self.memo[arg])
        except KeyError:
            raise StreamError(f"Memo value not found at index {arg}") from None

    def op_put(self, arg):
        if arg < 0:
            raise StreamError("negative PUT argument")
        self._memoize(arg, self._top())

    def op_memoize(self, arg):
        self._memoize(len(self.memo), self._top())

    def _memoize(self, key, value):
        if key not in self.memo:
            self._made()
        self.memo[key] = value

    def op_append(self, arg):
        value = self._pop()
        self._fill(len(self.stack), [value])

    def op_appends(self, arg):
        if not self.marks:
            raise StreamError("could not find MARK")
        start = self.marks.pop()
        values = self.stack[start:]
        del self.stack[start:]
        if start <= 0:
            raise StreamError("unpickling stack underflow")
        if values:
            self._fill(start, values)

    def _fill(self, index, values):
        target = self.stack[index - 1] if index > 0 else None
        if index <= 0:
            raise StreamError("unpickling stack underflow")
        if type(target) is list:
            target.extend(values)
            return
        self._shared(target, "APPEND")
        if isinstance(target, np.ndarray):
            raise Refused("APPEND to an array")
        extend = getattr(target, "extend", None)
        if extend is not None:
            extend(values)
        else:
            append = target.append
            for value in values:
                append(value)

    def op_setitem(self, arg):
        self._setitems(len(self.stack) - 2)

    def op_setitems(self, arg):
        if not self.marks:
            raise StreamError("could not find MARK")
        self._setitems(self.marks.pop())

    def _setitems(self, start):
        stack = self.stack
        if start <= 0 or start > len(stack):
            raise StreamError("unpickling stack underflow")
        items = stack[start:]
        if not items:
            return
        if len(items) % 2:
            raise StreamError("odd number of items for SETITEMS")
        del stack[start:]
        target = stack[start - 1]
        if type(target) is not dict:
            self._shared(target, "SETITEM")
            if isinstance(target, np.ndarray):
                raise Refused("SETITEM on an array")
        for key, value in zip(items[0::2], items[1::2]):
            target[key] = value

    def op_additems(self, arg):
        if not self.marks:
            raise StreamError("could not find MARK")
        start = self.marks.pop()
        if start <= 0 or start > len(self.stack):
            raise StreamError("unpickling stack underflow")
        items = self.stack[start:]
        if not items:
            return
        del self.stack[start:]
        target = self.stack[start - 1]
        if type(target) is set:
            target.update(items)
            return
        self._shared(target, "ADDITEMS")
        add = target.add
        for item in items:
            add(item)

    def op_build(self, arg):
        if len(self.stack) - 2 < self._fence():
            raise StreamError("unpickling stack underflow")
        state = self.stack.pop()
        inst = self.stack[-1]
        if isinstance(inst, np.dtype):
            self._build_dtype(inst, state)
            return
        if isinstance(inst, np.ndarray):
            self._build_array(inst, state)
            return
        self._shared(inst, "BUILD")
        setstate = getattr(inst, "__setstate__", None)
        if setstate is not None:
            setstate(state)
            return
        slotstate = None
        if type(state) is tuple and len(state) == 2:
            state, slotstate = state
        if state:
            attributes = inst.__dict__
            for key, value in state.items():
                attributes[sys.intern(key) if type(key) is str else key] = value
        if slotstate:
            for key, value in slotstate.items():
                setattr(inst, key, value)

    def _build_dtype(self, dtype, state):
        if self.new_dtypes.pop(id(dtype), None) is not dtype:
            raise UntrustedObjectError(
                "numpy", "dtype", self.source,
                reason="the pickle stream tried to change a dtype it did not just make",
                remedy="load it with trusted=True only if you trust this file")
        try:
            dtype.__setstate__(state)
        except (TypeError, ValueError, KeyError, IndexError, OverflowError) as exc:
            raise Refused(f"bad dtype state: {exc}") from None
        check_dtype(dtype)

    def _build_array(self, arr, state):
        if self._fresh.pop(id(arr), None) is not arr:
            raise UntrustedObjectError(
                "numpy", "ndarray", self.source,
                reason="the pickle stream tried to change an array it did not just make",
                remedy="load it with trusted=True only if you trust this file")
        if type(state) is not tuple:
            raise Refused("an array's state is not a tuple")
        for item in state:
            if isinstance(item, np.dtype):
                check_dtype(item)
        try:
            arr.__setstate__(state)
        except (TypeError, ValueError, KeyError, IndexError, OverflowError,
                RuntimeError) as exc:
            raise Refused(f"bad array state: {exc}") from None

    def op_ext(self, arg):
        # Whether or not the code is registered: the C unpickler would serve
        # a registered one from a process-wide cache, never asking find_class.
        module, name = copyreg._inverted_registry.get(arg, ("copyreg", f"ext{arg}"))
        raise UntrustedObjectError(
            module, name, self.source,
            reason=f"it is named by copyreg extension code {arg}, which restricted loads "
                   f"refuse",
            remedy="load it with trusted=True only if you trust this file")

    def op_next_buffer(self, arg):
        raise StreamError("pickle stream refers to out-of-band data but no *buffers* "
                          "argument was given")

    def op_readonly_buffer(self, arg):
        view = memoryview(self._top())
        if not view.readonly:
            self.stack[-1] = view.toreadonly()

    def op_nothing(self, arg):
        pass

    def op_proto(self, arg):
        self.on_protocol(arg)

    @staticmethod
    def on_protocol(protocol):
        """Told each PROTO (the unpickler resolves dotted names from 4 on)."""


_INTS = frozenset(("INT", "LONG", "LONG1", "LONG4"))

_HANDLERS = {
    "MARK": Machine.op_mark, "POP": Machine.op_pop, "POP_MARK": Machine.op_pop_mark,
    "DUP": Machine.op_dup, "NONE": Machine.op_const(None),
    "NEWTRUE": Machine.op_const(True), "NEWFALSE": Machine.op_const(False),
    "EMPTY_TUPLE": Machine.op_const(()),
    "EMPTY_DICT": Machine.op_empty(dict), "EMPTY_LIST": Machine.op_empty(list),
    "EMPTY_SET": Machine.op_empty(set),
    "PERSID": Machine.op_persid, "BINPERSID": Machine.op_binpersid,
    "REDUCE": Machine.op_reduce, "NEWOBJ": Machine.op_newobj,
    "NEWOBJ_EX": Machine.op_newobj_ex, "GLOBAL": Machine.op_global,
    "STACK_GLOBAL": Machine.op_stack_global, "INST": Machine.op_inst, "OBJ": Machine.op_obj,
    "LIST": Machine.op_list, "TUPLE": Machine.op_tuple,
    "TUPLE1": Machine.op_tuple_n(1), "TUPLE2": Machine.op_tuple_n(2),
    "TUPLE3": Machine.op_tuple_n(3),
    "DICT": Machine.op_dict, "FROZENSET": Machine.op_frozenset,
    "GET": Machine.op_get, "BINGET": Machine.op_get, "LONG_BINGET": Machine.op_get,
    "PUT": Machine.op_put, "BINPUT": Machine.op_put, "LONG_BINPUT": Machine.op_put,
    "MEMOIZE": Machine.op_memoize,
    "APPEND": Machine.op_append, "APPENDS": Machine.op_appends,
    "SETITEM": Machine.op_setitem, "SETITEMS": Machine.op_setitems,
    "ADDITEMS": Machine.op_additems, "BUILD": Machine.op_build,
    "EXT1": Machine.op_ext, "EXT2": Machine.op_ext, "EXT4": Machine.op_ext,
    "NEXT_BUFFER": Machine.op_next_buffer, "READONLY_BUFFER": Machine.op_readonly_buffer,
    "PROTO": Machine.op_proto, "FRAME": Machine.op_nothing,
}
# STOP is handled by the loop; literals (numbers, strings, bytes) have no handler.

#: Handlers of the opcodes without an argument, by opcode byte.
_NO_ARG = [None] * 256
for _code, _name in NAMES.items():
    if _name in _HANDLERS and _name not in _READS_ARGUMENT:
        _NO_ARG[_code] = _HANDLERS[_name]


def run(data, find_class, persistent_load, limits, source, on_protocol=None):
    """Execute the pickle stream ``data`` under the checks; its object.

    Raises
    ------
    UntrustedObjectError, LimitExceededError
    CorruptFileError
        For a malformed stream, a forged numpy description, or any call of
        the stream failing (the message names the cause).
    """
    machine = Machine(data, find_class, persistent_load, limits, source)
    if on_protocol is not None:
        machine.on_protocol = on_protocol
    try:
        with collector_paused():  # a stream makes many objects and frees none
            return machine.run()
    except CpersistError:
        raise
    except StreamError as exc:
        raise CorruptFileError(f"{source}: damaged pickle stream ({exc})") from None
    except Refused as exc:
        raise CorruptFileError(f"{source}: the pickle stream forges a numpy object: "
                               f"{exc}") from None
    except RecursionError:
        raise CorruptFileError(f"{source}: the pickle stream nests objects too deeply") from None
    except Exception as exc:
        raise CorruptFileError(
            f"{source}: the pickle stream could not be loaded ({type(exc).__name__}: "
            f"{str(exc)[:200]})") from exc
