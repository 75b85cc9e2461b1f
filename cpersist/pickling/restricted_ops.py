"""The opcodes of the restricted load's pickle machine (:mod:`.restricted`):
what each does to a :class:`~.machine.Machine`'s stack and memo, what it
charges to the load's budget, and what it refuses to change.

Each is a function ``op(machine, argument)``; :data:`HANDLERS` lists them by
opcode byte. The loop of :mod:`.restricted` runs STOP and the commonest
opcodes of a dump itself (MARK, MEMOIZE, BINGET, BINPUT, TUPLE1, TUPLE2,
REDUCE) and pushes the :data:`LITERALS`: they have no function here.
"""

import copyreg
import sys
import uuid

import numpy as np

from ..exceptions import UntrustedObjectError
from ..stream.args import StreamError, by_code
from .array_builders import set_array_state
from .builders import ENTRY, SLOT
from .checks import (UNCHECKED_KEY, Refused, brief, check_dtype, check_dtype_state,
                     check_uuid_state, sets_nothing)
from .machine import UNDERFLOW

#: Opcodes whose argument the loop pushes as it is (INT and LONG's are
#: checked for their digits first, by :func:`op_int`).
LITERALS = frozenset((
    "BININT", "BININT1", "BININT2", "FLOAT", "BINFLOAT", "STRING", "BINSTRING",
    "SHORT_BINSTRING", "UNICODE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8",
    "BINBYTES", "SHORT_BINBYTES", "BINBYTES8"))
_INTS = ("INT", "LONG", "LONG1", "LONG4")


def op_pop(m, arg):
    if m.marks and m.marks[-1] == len(m.stack):
        m.marks.pop()
    else:
        m.pop()


def op_pop_mark(m, arg):
    m.pop_mark()


def op_dup(m, arg):
    m.need(1)
    m.stack.append(m.again(m.stack[-1]))


def op_bytearray8(m, arg):
    m.stack.append(m.made_buffer(arg))


def op_const(value):
    def push(m, arg):
        m.stack.append(value)
    return push


def op_empty(kind):
    def push(m, arg):
        m.made()
        m.stack.append(kind())
    return push


def op_int(m, arg):
    if type(arg) is int:  # INT's "00"/"01" are bools
        m.check_int(arg)
    m.stack.append(arg)


def op_persid(m, arg):
    m.stack.append(m.persistent_load(arg))


def op_binpersid(m, arg):
    m.stack.append(m.persistent_load(m.pop()))


def op_newobj(m, arg):
    m.need(2)
    args = m.stack.pop()
    cls = m.stack.pop()
    if not isinstance(cls, type):
        raise StreamError("NEWOBJ class argument isn't a type object")
    if type(args) is not tuple:
        raise StreamError("NEWOBJ expected an arg tuple.")
    m.stack.append(m.call(cls, args, None, new=True))


def op_newobj_ex(m, arg):
    m.need(3)
    kwargs = m.stack.pop()
    args = m.stack.pop()
    cls = m.stack.pop()
    if not isinstance(cls, type):
        raise StreamError("NEWOBJ_EX class argument must be a type")
    if type(args) is not tuple or type(kwargs) is not dict:
        raise StreamError("NEWOBJ_EX args and kwargs must be a tuple and a dict")
    m.stack.append(m.call(cls, args, kwargs, new=True))


def op_global(m, arg):
    module, _, name = arg.partition(" ")
    m.stack.append(m.named_global(module, name))


def op_stack_global(m, arg):
    m.need(2)
    name = m.stack.pop()
    module = m.stack.pop()
    if type(name) is not str or type(module) is not str:
        raise StreamError("STACK_GLOBAL requires str")
    m.stack.append(m.named_global(module, name))


def op_inst(m, arg):
    module, _, name = arg.partition(" ")
    cls = m.named_global(module, name)
    m.stack.append(m.instantiate(cls, m.pop_mark()))


def op_obj(m, arg):
    if m.marks:
        m.need(1)  # the class, above the MARK
    items = m.pop_mark()
    m.stack.append(m.instantiate(items[0], items[1:]))


def op_list(m, arg):
    m.made()
    items = m.pop_mark()
    m.alloc(SLOT * len(items))
    m.stack.append(items)


def op_tuple(m, arg):
    m.made()
    items = tuple(m.pop_mark())
    m.alloc(SLOT * len(items))
    m.stack.append(m.nested(items))


def op_tuple3(m, arg):
    m.made()
    m.need(3)
    items = tuple(m.stack[-3:])
    del m.stack[-3:]
    m.stack.append(m.nested(items))


def op_dict(m, arg):
    items = m.pop_mark()
    if len(items) % 2:
        raise StreamError("odd number of items for DICT")
    m.made()
    m.alloc(ENTRY * (len(items) // 2))
    made = {}
    for key, value in zip(items[0::2], items[1::2]):
        if type(key) is not UNCHECKED_KEY:
            m.key(made, key)
        made[key] = value
    m.stack.append(made)


def op_frozenset(m, arg):
    m.made()
    items = m.pop_mark()
    m.alloc(ENTRY * len(items))
    made = set()
    for item in items:
        m.key(made, item)
        made.add(item)
    m.stack.append(m.nested(frozenset(made)))


def op_get(m, arg):  # GET, LONG_BINGET (BINGET is the loop's)
    try:
        m.stack.append(m.again(m.memo[arg]))
    except KeyError:
        raise StreamError(f"Memo value not found at index {arg}") from None


def op_put(m, arg):  # PUT, LONG_BINPUT (BINPUT is the loop's)
    if arg < 0:
        raise StreamError("negative PUT argument")
    m.need(1)
    if arg not in m.memo:
        m.made()
    m.memo[arg] = m.stack[-1]


def op_append(m, arg):
    value = m.pop()
    _fill(m, m.below(len(m.stack)), [value])


def op_appends(m, arg):
    if not m.marks:
        raise StreamError("could not find MARK")
    start = m.marks.pop()
    values = m.stack[start:]
    del m.stack[start:]
    if start <= 0:
        raise StreamError(UNDERFLOW)
    if values:
        _fill(m, m.below(start), values)


def _fill(m, target, values):
    m.alloc(SLOT * len(values))
    if type(target) is list:
        target.extend(values)
        return
    m.target(target, "APPEND")
    if isinstance(target, np.ndarray):
        raise Refused("APPEND to an array")
    extend = getattr(target, "extend", None)
    if extend is not None:
        extend(values)
    else:
        append = target.append
        for value in values:
            append(value)


def op_setitem(m, arg):
    _setitems(m, len(m.stack) - 2)


def op_setitems(m, arg):
    if not m.marks:
        raise StreamError("could not find MARK")
    _setitems(m, m.marks.pop())


def _setitems(m, start):
    target = m.below(start)
    stack = m.stack
    items = stack[start:]
    if not items:
        return
    if len(items) % 2:
        raise StreamError("odd number of items for SETITEMS")
    del stack[start:]
    if type(target) is list and not m.is_global(target) and all(
            type(key) is int or type(key) is bool for key in items[0::2]):
        for key, value in zip(items[0::2], items[1::2]):  # by index, as C does
            target[key] = value
        return
    if type(target) is not dict:
        m.target(target, "SETITEM")
        if not isinstance(target, dict):  # a trusted class's own mapping
            if isinstance(target, (np.ndarray, bytearray, list)):
                raise Refused(f"SETITEM on {brief(target)}")
    m.alloc(ENTRY * (len(items) // 2))
    for key, value in zip(items[0::2], items[1::2]):
        if type(key) is not UNCHECKED_KEY:
            m.key(target, key)
        target[key] = value


def op_additems(m, arg):
    if not m.marks:
        raise StreamError("could not find MARK")
    start = m.marks.pop()
    target = m.below(start)
    items = m.stack[start:]
    if not items:
        return
    del m.stack[start:]
    if type(target) is not set:
        m.target(target, "ADDITEMS")
    m.alloc(ENTRY * len(items))
    add = target.add
    for item in items:
        m.key(target, item)
        add(item)


def op_build(m, arg):
    m.need(2)
    state = m.stack.pop()
    build(m, m.stack[-1], state)


def build(m, inst, state):
    """``BUILD``: ``inst`` given ``state``, if the stream may still change it."""
    if sets_nothing(inst, state):
        return
    if isinstance(inst, np.dtype):
        _build_dtype(m, inst, state)
        return
    m.target(inst, "BUILD")
    if isinstance(inst, np.ndarray):
        m.settled(inst)  # given its state once
        set_array_state(m, inst, state)
        return
    setstate = getattr(inst, "__setstate__", None)
    if setstate is not None:
        if type(inst) is uuid.UUID:
            check_uuid_state(state)
        setstate(state)
        return
    slotstate = None
    if type(state) is tuple and len(state) == 2:
        state, slotstate = state
    if state:
        if type(state) is not dict:
            raise Refused(f"an object's state is {brief(state)}")
        m.alloc(ENTRY * len(state))
        attributes = inst.__dict__
        for key, value in state.items():
            if type(key) is not str:
                raise Refused(f"an attribute named {brief(key)}")
            attributes[sys.intern(key)] = value
    if slotstate:
        if type(slotstate) is not dict:
            raise Refused(f"an object's slot state is {brief(slotstate)}")
        for key, value in slotstate.items():
            if type(key) is not str:
                raise Refused(f"an attribute named {brief(key)}")
            setattr(inst, key, value)


def _build_dtype(m, dtype, state):
    if m.new_dtypes.pop(id(dtype), None) is not dtype:
        raise UntrustedObjectError(
            "numpy", "dtype", m.source,
            reason="the pickle stream tried to change a dtype it did not just make",
            remedy="load it with trusted=True only if you trust this file")
    check_dtype_state(dtype, state)
    try:
        dtype.__setstate__(state)
    except (TypeError, ValueError, KeyError, IndexError, OverflowError) as exc:
        raise Refused(f"bad dtype state: {exc}") from None
    check_dtype(dtype)


def op_ext(m, arg):
    # Whether or not the code is registered: the C unpickler would serve
    # a registered one from a process-wide cache, never asking find_class.
    module, name = copyreg._inverted_registry.get(arg, ("copyreg", f"ext{arg}"))
    raise UntrustedObjectError(
        module, name, m.source,
        reason=f"it is named by copyreg extension code {arg}, which restricted loads refuse",
        remedy="load it with trusted=True only if you trust this file")


def op_next_buffer(m, arg):
    m.stack.append(m.next_buffer())


def op_readonly_buffer(m, arg):
    # Of bytes, nothing to do (as in C); of a buffer, a read-only view. Not
    # of a bytearray the stream made, which no pickler writes.
    m.need(1)
    top = m.stack[-1]
    if type(top) is memoryview:
        m.stack[-1] = m.read_only(top)
    elif type(top) is not bytes:
        raise Refused(f"READONLY_BUFFER of {brief(top)}")


def op_nothing(m, arg):
    pass


def op_proto(m, arg):
    m.protocol = arg
    m.on_protocol(arg)


#: The handler of each opcode the loop does not run itself, by opcode byte.
HANDLERS = by_code({
    "POP": op_pop, "POP_MARK": op_pop_mark, "DUP": op_dup,
    "NONE": op_const(None), "NEWTRUE": op_const(True), "NEWFALSE": op_const(False),
    "EMPTY_TUPLE": op_const(()),
    "EMPTY_DICT": op_empty(dict), "EMPTY_LIST": op_empty(list), "EMPTY_SET": op_empty(set),
    **dict.fromkeys(_INTS, op_int),
    "PERSID": op_persid, "BINPERSID": op_binpersid,
    "NEWOBJ": op_newobj, "NEWOBJ_EX": op_newobj_ex, "GLOBAL": op_global,
    "STACK_GLOBAL": op_stack_global, "INST": op_inst, "OBJ": op_obj,
    "LIST": op_list, "TUPLE": op_tuple, "TUPLE3": op_tuple3,
    "DICT": op_dict, "FROZENSET": op_frozenset,
    "BYTEARRAY8": op_bytearray8, "GET": op_get, "LONG_BINGET": op_get, "PUT": op_put, "LONG_BINPUT": op_put,
    "APPEND": op_append, "APPENDS": op_appends,
    "SETITEM": op_setitem, "SETITEMS": op_setitems,
    "ADDITEMS": op_additems, "BUILD": op_build,
    "EXT1": op_ext, "EXT2": op_ext, "EXT4": op_ext,
    "NEXT_BUFFER": op_next_buffer, "READONLY_BUFFER": op_readonly_buffer,
    "PROTO": op_proto, "FRAME": op_nothing,
})
