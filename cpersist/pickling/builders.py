"""What a restricted load builds for each call a stream asks for: Python
values here, numpy's in :mod:`.array_builders`, cpersist's and torch's in
:mod:`.format_builders`.

A builder takes the stream's arguments, checks every one of them in Python
(types, sizes, the memory they cost, charged to the load's budget before
anything is made) and builds a value from them. Arrays are made here only,
as fresh copies of immutable bytes or zero-filled, never over an object the
stream can still change and never with uninitialised memory; no numpy
function is applied to lists the stream built; containers are filled item
by item, each key checked (:meth:`~.machine.Machine.key`).

Each builder is ``builder(machine, func, args, kwargs, new)`` (``new``: the
stream asked for ``func.__new__(func, *args)``), registered against its
global in :mod:`.allowlist`.
"""

import collections
import datetime
import decimal
import fractions
import re

from ..exceptions import UntrustedObjectError
from .checks import Refused, brief, check_plain, is_scalar

#: Encodings a ``str``/``bytes`` call may name: looking up another imports a module.
_TEXT_ENCODINGS = frozenset(("utf-8", "utf8", "latin1", "latin-1", "ascii", "utf-16", "utf-32"))
_EXPONENT = re.compile(r"[eE]\s*([+-]?[0-9_]+)")
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
    made = invoke(func, args, kwargs, new)
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
    return invoke(func, args, kwargs, new)


def build_range(machine, func, args, kwargs, new):
    if not all(type(n) is int for n in args) or kwargs:
        raise Refused("a range of other than ints")
    for n in args:
        machine.check_int(n)
    made = invoke(func, args, kwargs, new)
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
    return invoke(func, args, kwargs, new)


#: Values a datetime call may take besides scalars (a timezone's offset, a tzinfo).
_DATETIMES = (datetime.date, datetime.datetime, datetime.time, datetime.timedelta,
              datetime.timezone)


def _items_of(machine, func, source):
    if source is None:
        return ()
    if type(source) in (bytes, bytearray, str):  # what a list of it would cost, refused
        machine.alloc(SLOT * len(source))
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
    if func is tuple:
        return machine.nested(tuple(items))
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
    made = set() if func is frozenset else func.__new__(func) if new else func()
    for item in items:
        machine.key(made, item)
        made.add(item)
    if func is frozenset:
        return machine.nested(frozenset(made))
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
    # A Counter built from a mapping takes its counts as they are, as dict's would.
    store = dict.__setitem__ if func is collections.Counter else type(made).__setitem__
    for key, value in (*pairs, *kwargs.items()):
        machine.key(made, key)
        store(made, key, value)
    return machine.made_target(made)


_FACTORIES = (list, dict, set, int, float, str, bytes, tuple, frozenset, bool, complex,
              collections.OrderedDict, collections.Counter, collections.deque)


def build_instance(machine, func, args, kwargs, new):
    """A class made empty and filled in by ``BUILD`` (``uuid.UUID``, made
    as the nil UUID until then)."""
    if args or kwargs or not new:
        if func.__name__ == "UUID":
            bound = bind(func, ("hex", "bytes", "bytes_le", "fields", "int", "version",
                                "is_safe"), args, kwargs)
            for value in bound.values():
                check_plain(value, "a UUID's argument", depth=2)
            return invoke(func, args, kwargs, False)
        raise Refused(f"{brief(func)} called with arguments")
    made = func.__new__(func)
    # A whole value until BUILD gives it its state (a stream may give none):
    # never an object missing the attributes its methods read.
    made.__setstate__({"int": 0})
    return machine.made_target(made)


def build_reconstructor(machine, func, args, kwargs, new):
    """``copyreg._reconstructor(cls, base, state)`` (protocols 0 and 1 pickle
    instances so): ``base.__new__(cls)`` of a class the caller trusts, from
    ``object`` or a builtin container. The allowlist's own classes rebuild
    by their own rows, never so (``MaskedArray.__new__(MaskedConstant)``
    gives numpy's singleton)."""
    if len(args) != 3 or kwargs:
        raise Refused("copyreg._reconstructor takes (class, base, state)")
    cls, base, state = args
    if base not in _RECONSTRUCTOR_BASES or not isinstance(cls, type) or not issubclass(
            cls, base) or not machine.is_trusted(cls):
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


def invoke(func, args, kwargs, new):
    if new:
        return func.__new__(func, *args, **kwargs)
    return func(*args, **kwargs)


def build_encode(machine, func, args, kwargs, new):
    """``_codecs.encode(text, "latin1")``, as protocols 0-2 pickle bytes."""
    if args and type(args[0]) is str:
        machine.alloc(len(args[0]))
    return func(*args, **kwargs)
