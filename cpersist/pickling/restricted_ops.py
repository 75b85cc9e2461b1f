"""The opcodes of the restricted load's pickle machine (:mod:`.restricted`):
what each does to the stack and the memo, what it charges to the load's
budget, and what it refuses to change.
"""

import copyreg
import sys

import numpy as np

from ..exceptions import UntrustedObjectError
from ..stream.args import NAMES, StreamError
from ..stream.args import _READERS as _READS_ARGUMENT
from .array_builders import set_array_state
from .builders import ENTRY, SLOT
from .checks import (UNCHECKED_KEY, Refused, brief, check_dtype, check_dtype_state,
                     sets_nothing)


class Opcodes:
    """The opcode handlers of :class:`~.restricted.Machine`."""

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
        items = self._pop_mark()
        self.alloc(SLOT * len(items))
        self.stack.append(items)

    def op_tuple(self, arg):
        self._made()
        items = tuple(self._pop_mark())
        self.alloc(SLOT * len(items))
        self.stack.append(self.nested(items))

    def op_tuple_n(n):
        def build(self, arg):
            self._made()
            self.stack.append(self.nested(self._pop_n(n)))
        return build

    def op_dict(self, arg):
        items = self._pop_mark()
        if len(items) % 2:
            raise StreamError("odd number of items for DICT")
        self._made()
        self.alloc(ENTRY * (len(items) // 2))
        made = {}
        for key, value in zip(items[0::2], items[1::2]):
            if type(key) is not UNCHECKED_KEY:
                self.key(made, key)
            made[key] = value
        self.stack.append(made)

    def op_frozenset(self, arg):
        self._made()
        items = self._pop_mark()
        self.alloc(ENTRY * len(items))
        made = set()
        for item in items:
            self.key(made, item)
            made.add(item)
        self.stack.append(self.nested(frozenset(made)))

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
        if index <= 0:
            raise StreamError("unpickling stack underflow")
        target = self.stack[index - 1]
        self.alloc(SLOT * len(values))
        if type(target) is list:
            target.extend(values)
            return
        self.target(target, "APPEND")
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
        if type(target) is list and not self.is_global(target) and all(
                type(key) is int or type(key) is bool for key in items[0::2]):
            for key, value in zip(items[0::2], items[1::2]):  # by index, as C does
                target[key] = value
            return
        if type(target) is not dict:
            self.target(target, "SETITEM")
            if not isinstance(target, dict):  # a trusted class's own mapping
                if isinstance(target, (np.ndarray, bytearray, list)):
                    raise Refused(f"SETITEM on {brief(target)}")
        self.alloc(ENTRY * (len(items) // 2))
        for key, value in zip(items[0::2], items[1::2]):
            if type(key) is not UNCHECKED_KEY:
                self.key(target, key)
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
        if type(target) is not set:
            self.target(target, "ADDITEMS")
        self.alloc(ENTRY * len(items))
        add = target.add
        for item in items:
            self.key(target, item)
            add(item)

    def op_build(self, arg):
        if len(self.stack) - 2 < self._fence():
            raise StreamError("unpickling stack underflow")
        state = self.stack.pop()
        self.build(self.stack[-1], state)

    def build(self, inst, state):
        """``BUILD``: ``inst`` given ``state``, if the stream may still change it."""
        if sets_nothing(inst, state):
            return
        if isinstance(inst, np.dtype):
            self._build_dtype(inst, state)
            return
        self.target(inst, "BUILD")
        if isinstance(inst, np.ndarray):
            del self._targets[id(inst)]  # given its state once
            set_array_state(self, inst, state)
            return
        setstate = getattr(inst, "__setstate__", None)
        if setstate is not None:
            setstate(state)
            return
        slotstate = None
        if type(state) is tuple and len(state) == 2:
            state, slotstate = state
        if state:
            if type(state) is not dict:
                raise Refused(f"an object's state is {brief(state)}")
            self.alloc(ENTRY * len(state))
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

    def _build_dtype(self, dtype, state):
        if self.new_dtypes.pop(id(dtype), None) is not dtype:
            raise UntrustedObjectError(
                "numpy", "dtype", self.source,
                reason="the pickle stream tried to change a dtype it did not just make",
                remedy="load it with trusted=True only if you trust this file")
        check_dtype_state(dtype, state)
        try:
            dtype.__setstate__(state)
        except (TypeError, ValueError, KeyError, IndexError, OverflowError) as exc:
            raise Refused(f"bad dtype state: {exc}") from None
        check_dtype(dtype)

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
        # Only ever after NEXT_BUFFER, which is refused: a view of something
        # else would pin or share the memory of an object the stream made.
        if type(self._top()) is not bytes:
            raise Refused("READONLY_BUFFER of other than bytes")

    def op_nothing(self, arg):
        pass

    def op_proto(self, arg):
        self.on_protocol(arg)

    @staticmethod
    def on_protocol(protocol):
        """Told each PROTO (the unpickler resolves dotted names from 4 on)."""


_INTS = frozenset(("INT", "LONG", "LONG1", "LONG4"))

_HANDLERS = {
    "MARK": Opcodes.op_mark, "POP": Opcodes.op_pop, "POP_MARK": Opcodes.op_pop_mark,
    "DUP": Opcodes.op_dup, "NONE": Opcodes.op_const(None),
    "NEWTRUE": Opcodes.op_const(True), "NEWFALSE": Opcodes.op_const(False),
    "EMPTY_TUPLE": Opcodes.op_const(()),
    "EMPTY_DICT": Opcodes.op_empty(dict), "EMPTY_LIST": Opcodes.op_empty(list),
    "EMPTY_SET": Opcodes.op_empty(set),
    "PERSID": Opcodes.op_persid, "BINPERSID": Opcodes.op_binpersid,
    "REDUCE": Opcodes.op_reduce, "NEWOBJ": Opcodes.op_newobj,
    "NEWOBJ_EX": Opcodes.op_newobj_ex, "GLOBAL": Opcodes.op_global,
    "STACK_GLOBAL": Opcodes.op_stack_global, "INST": Opcodes.op_inst, "OBJ": Opcodes.op_obj,
    "LIST": Opcodes.op_list, "TUPLE": Opcodes.op_tuple,
    "TUPLE1": Opcodes.op_tuple_n(1), "TUPLE2": Opcodes.op_tuple_n(2),
    "TUPLE3": Opcodes.op_tuple_n(3),
    "DICT": Opcodes.op_dict, "FROZENSET": Opcodes.op_frozenset,
    "GET": Opcodes.op_get, "BINGET": Opcodes.op_get, "LONG_BINGET": Opcodes.op_get,
    "PUT": Opcodes.op_put, "BINPUT": Opcodes.op_put, "LONG_BINPUT": Opcodes.op_put,
    "MEMOIZE": Opcodes.op_memoize,
    "APPEND": Opcodes.op_append, "APPENDS": Opcodes.op_appends,
    "SETITEM": Opcodes.op_setitem, "SETITEMS": Opcodes.op_setitems,
    "ADDITEMS": Opcodes.op_additems, "BUILD": Opcodes.op_build,
    "EXT1": Opcodes.op_ext, "EXT2": Opcodes.op_ext, "EXT4": Opcodes.op_ext,
    "NEXT_BUFFER": Opcodes.op_next_buffer, "READONLY_BUFFER": Opcodes.op_readonly_buffer,
    "PROTO": Opcodes.op_proto, "FRAME": Opcodes.op_nothing,
}
# STOP is handled by the loop; literals (numbers, strings, bytes) have no handler.

#: Handlers of the opcodes without an argument, by opcode byte.
_NO_ARG = [None] * 256
for _code, _name in NAMES.items():
    if _name in _HANDLERS and _name not in _READS_ARGUMENT:
        _NO_ARG[_code] = _HANDLERS[_name]
