"""The checks of what a restricted load's stream hands to the code that
builds its objects (:mod:`.builders`): dtypes rebuilt by numpy from a plain
description, plain values (scalars and shallow containers of them), shapes,
and the keys of sets and dicts (see :mod:`.restricted`).
"""

import uuid

import numpy as np

from ..format.limits import STR_HASH_PREDICTABLE
from ..format.named_dtypes import FIRST_USER_TYPE, name_of
from .brief import SCALARS, brief

#: Keys ``SETITEM`` and ``DICT`` need not show to ``Machine.key``: strings,
#: unless their hashes are predictable.
UNCHECKED_KEY = None if STR_HASH_PREDICTABLE else str
#: Types without ``__setstate__`` or ``__dict__``: ``BUILD`` can set nothing on them.
_PLAIN = frozenset((type(None), bool, int, float, complex, str, bytes, bytearray, tuple, list,
                    dict, set, frozenset))


def sets_nothing(inst, state):
    """Whether ``BUILD`` of ``state`` on ``inst`` is one the C unpickler
    accepts and does nothing for: no state (``None``, or ``(None, {})``)
    given to a plain value, which has nothing it could set."""
    return type(inst) in _PLAIN and (state is None or type(state) is tuple and len(state) == 2
                                     and state[0] is None and type(state[1]) is dict
                                     and not state[1])


#: numpy's dtype flags that say an item holds Python objects
#: (NPY_ITEM_REFCOUNT, NPY_LIST_PICKLE).
_OBJECT_FLAGS = 0x01 | 0x02


def check_uuid_state(state):
    """Refuse a ``uuid.UUID`` state that ``UUID.__setstate__`` would take
    as it is (an ``int`` of any type or size makes a UUID whose methods
    raise): ``{"int": 0 <= n < 2**128}`` and optionally ``"is_safe"``."""
    if type(state) is not dict or "int" not in state or not set(state) <= _UUID_STATE or (
            type(state["int"]) is not int or not 0 <= state["int"] < 1 << 128) or (
            state.get("is_safe") not in _UUID_SAFETY):
        raise Refused(f"a UUID's state {brief(state)}")


_UUID_STATE = frozenset(("int", "is_safe"))
#: What ``UUID.__getstate__`` writes for ``is_safe`` (None: left out, or unknown).
_UUID_SAFETY = tuple(safety.value for safety in uuid.SafeUUID)


class Refused(Exception):
    """A forged numpy description: the message says what is wrong (raised
    to the caller as :class:`~cpersist.CorruptFileError`)."""


def check_dtype(dtype, depth=0):
    """Raise :class:`Refused` unless ``dtype`` is one numpy builds from its
    plain description: fields inside the item, object fields where numpy
    puts them, the flags numpy gives it."""
    if type(dtype) is not np.dtype and not isinstance(dtype, np.dtype):
        raise Refused(f"{type(dtype).__name__} given where a dtype is needed")
    if type(dtype) is _STRING_DTYPE:
        # numpy 2's variable-width strings: items are numpy's own string
        # handles, never Python objects; what it may vary is its NA value.
        if not is_scalar(getattr(dtype, "na_object", None)):
            raise Refused("a StringDType whose NA value is not a plain scalar")
        return dtype
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
    elif dtype.num >= FIRST_USER_TYPE:  # a type numpy does not define
        if name_of(dtype) is None:
            raise Refused(f"a dtype of type {brief(dtype.type)}, not one of ml_dtypes' named "
                          f"types in native byte order")
        expected = np.dtype(dtype.type)
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


_STRING_DTYPE = getattr(np.dtypes, "StringDType", None)


def is_scalar(value):
    return type(value) in SCALARS


def check_plain(value, what, depth=8, budget=None):
    """Raise :class:`Refused` unless ``value`` is a scalar, a dtype, or a
    list, tuple or dict of plain values at most ``depth`` deep and of at
    most ``budget`` (a one-item list counting down) items in all."""
    if budget is None:
        budget = [4096]
    kind = type(value)
    if kind in SCALARS or isinstance(value, (np.dtype, np.generic)):
        return value
    if depth <= 0:
        raise Refused(f"{what} nested too deeply")
    if kind is tuple or kind is list:
        items = value
    elif kind is dict:
        items = [*value.keys(), *value.values()]
    elif isinstance(value, type) and issubclass(value, (np.generic, float, int, complex,
                                                        str, bytes, bool)):
        return value  # a scalar type as a dtype's description (numpy.float64)
    else:
        raise Refused(f"{what} holds {brief(value)}")
    budget[0] -= len(items)
    if budget[0] < 0:
        raise Refused(f"{what} holds too many items")
    for item in items:
        check_plain(item, what, depth - 1, budget)
    return value


def as_dtype(value):
    """A numpy dtype from a stream's description of one, checked."""
    if not isinstance(value, np.dtype):
        check_plain(value, "a dtype's description")
        try:
            value = np.dtype(value)
        except (TypeError, ValueError, SyntaxError, KeyError, RecursionError) as exc:
            raise Refused(f"bad dtype {brief(value)}: {exc}") from None
    return check_dtype(value)


#: numpy's limit on an array's dimensions.
MAX_DIMS = 64


def as_shape(value):
    """An array shape (a tuple of non-negative ints) and its item count."""
    if type(value) is int:
        value = (value,)
    elif type(value) is list:
        value = tuple(value)
    if type(value) is not tuple or len(value) > MAX_DIMS or not all(
            type(n) is int and n >= 0 for n in value):
        raise Refused(f"bad shape {brief(value)}")
    count = 1
    for n in value:
        count *= n
    return value, count


def as_order(value, default="C"):
    if value is None:
        return default
    if value not in ("C", "F"):
        raise Refused(f"bad order {brief(value)}")
    return value


def raw_extent(shape, strides, itemsize, offset):
    """``(lowest, highest)`` byte an array of this layout reaches, from its
    buffer's start, or None for an empty one."""
    if 0 in shape or itemsize == 0:
        return None
    low = high = offset
    for n, step in zip(shape, strides):
        if step < 0:
            low += (n - 1) * step
        else:
            high += (n - 1) * step
    return low, high + itemsize


def check_dtype_state(dtype, state):
    """Raise :class:`Refused` unless ``state`` is one numpy's own dtypes
    pickle for ``dtype``: ``(3, byteorder, subarray, names, fields, itemsize,
    alignment, flags)``, with metadata after it as version 4 (numpy's
    ``__setstate__`` reads other forms unchecked, and crashes on some)."""
    if type(state) is not tuple or len(state) not in (8, 9) or state[0] != len(state) - 5 or (
            type(state[0]) is not int):
        raise Refused("a dtype state other than numpy's (version 3 or 4)")
    _, order, subarray, names, fields, itemsize, alignment, flags = state[:8]
    if order not in ("<", ">", "|", "="):
        raise Refused(f"a dtype state of byte order {brief(order)}")
    if subarray is not None and not (
            type(subarray) is tuple and len(subarray) == 2
            and isinstance(subarray[0], np.dtype) and type(subarray[1]) is tuple
            and len(subarray[1]) <= 64
            and all(type(n) is int and n >= 0 for n in subarray[1])):
        raise Refused("a dtype state whose subarray is not (dtype, shape)")
    if (names is None) != (fields is None):
        raise Refused("a dtype state with names but no fields, or fields but no names")
    if names is not None:
        if type(names) is not tuple or not all(type(n) is str for n in names) or (
                type(fields) is not dict):
            raise Refused("a dtype state whose names are not strings")
        for key, field in fields.items():
            if not (type(field) is tuple and len(field) in (2, 3)
                    and isinstance(field[0], np.dtype)
                    and type(field[1]) is int and field[1] >= 0):
                raise Refused(f"a dtype state whose field {brief(key)} is not (dtype, offset)")
            if len(field) == 3:
                check_plain(field[2], "a field's title", depth=1)
        if not all(name in fields for name in names):
            raise Refused("a dtype state naming a field it does not describe")
    # A flexible dtype made unsized ("U") takes its size from the state.
    if type(itemsize) is not int or itemsize not in (-1, dtype.itemsize) and not (
            dtype.itemsize == 0 and 0 <= itemsize < 1 << 31):
        raise Refused(f"a dtype state of item size {brief(itemsize)} for a dtype of "
                      f"{dtype.itemsize}")
    if type(alignment) is not int or not -1 <= alignment <= 64 or (
            type(flags) is not int or not 0 <= flags < 1024):
        raise Refused("a dtype state of odd alignment or flags")
    if len(state) == 9:
        check_plain(state[8], "a dtype's metadata", depth=4)
