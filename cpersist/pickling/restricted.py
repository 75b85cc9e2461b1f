"""The restricted load: a pickle machine that checks what it builds.

``trusted=False`` (or an allowlist) loads with :class:`Machine` instead of
the C unpickler. It reads opcodes with :mod:`cpersist.stream.args` (as the
C unpickler reads them) and executes them itself, so that every step a
stream asks for is decided here:

* Globals are resolved by the unpickler's ``find_class`` (the allowlist);
  copyreg extension codes and persistent ids are refused.
* A call goes through a checker when its callable builds arrays, dtypes or
  large objects (:data:`.checks.CHECKED_CALLS`): an array is made over raw bytes only
  with a dtype holding no Python objects, every dtype is rebuilt by numpy
  from a plain description and checked (its fields inside its items, its
  flags those numpy gives it), and sizes are bounded by :class:`Limits`.
* ``BUILD`` and the container opcodes cannot change an object the stream
  did not make: no class, function, module, global, shared dtype or array.
* :class:`~cpersist.Limits` bound the opcodes, objects, digits and memory.

To let a new callable through with a check, add it to :data:`.checks.CHECKED_CALLS`
(``callable -> checker(machine, func, args, kwargs, new)``).
"""

import decimal
import pickle
import types

import numpy as np

from .._runtime.gc import collector_paused
from ..exceptions import CorruptFileError, CpersistError, UntrustedObjectError
from ..stream.args import StreamError, next_frame_end, read_in_frame
from .checks import Refused, _checker, _invoke
from .limits import exceeded
from .restricted_ops import _HANDLERS, _INTS, _NO_ARG, Opcodes

_MEMOIZE = pickle.MEMOIZE[0]
_REDUCE = pickle.REDUCE[0]
_MARK = pickle.MARK[0]
_TUPLE1 = pickle.TUPLE1[0]
#: Opcodes without an argument that the loop does itself.
_ONE_BYTE_OPS = frozenset((_MEMOIZE, _REDUCE, _MARK, _TUPLE1, pickle.TUPLE2[0]))
_BININT1 = pickle.BININT1[0]
_BININT2 = pickle.BININT2[0]
_SHORT_BINUNICODE = pickle.SHORT_BINUNICODE[0]
#: Opcodes of a one-byte argument, by byte: what the loop does with it.
_ONE_BYTE_ARGUMENT = {_BININT1: None, pickle.BINGET[0]: Opcodes.op_get,
                      pickle.BINPUT[0]: Opcodes.op_put}

#: Objects a stream may not change with BUILD, SETITEM, APPEND or ADDITEMS.
_SHARED_KINDS = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
                 types.MethodType, types.MethodWrapperType, types.WrapperDescriptorType,
                 types.MethodDescriptorType, classmethod, staticmethod, property,
                 np.dtype, np.generic)


class Machine(Opcodes):
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
        marks = self.marks
        memo = self.memo
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
            code = data[pos]
            # The commonest opcodes of a state dict's stream are done here
            # rather than by their handlers, and read here rather than by
            # read_in_frame (which they would make most of a restricted
            # load's time): each only where it lies whole in the data and
            # crosses no frame's end, else read the general way.
            if code in _ONE_BYTE_OPS:
                fence = marks[-1] if marks else 0
                if code == _MEMOIZE:
                    if len(stack) <= fence:
                        raise StreamError("unpickling stack underflow")
                    key = len(memo)
                    if key not in memo:
                        self._made()
                    memo[key] = stack[-1]
                elif code == _REDUCE:
                    if len(stack) <= fence + 1:
                        raise StreamError("unpickling stack underflow")
                    args = stack.pop()
                    if type(args) is not tuple:
                        raise StreamError("argument list must be a tuple")
                    stack[-1] = self.call(stack[-1], args)
                elif code == _MARK:
                    marks.append(len(stack))
                else:  # TUPLE1, TUPLE2
                    n = 1 if code == _TUPLE1 else 2
                    if len(stack) - n < fence:
                        raise StreamError("unpickling stack underflow")
                    self._made()
                    items = tuple(stack[-n:])
                    del stack[-n:]
                    push(items)
                pos += 1
                continue
            handler = no_arg[code]
            if handler is not None:  # one byte: nothing to read, no frame to cross
                pos += 1
                handler(self, None)
                continue
            if code in _ONE_BYTE_ARGUMENT and pos + 2 <= end:  # no frame split in two
                arg = data[pos + 1]
                pos += 2
                if code == _BININT1:
                    push(arg)
                else:
                    _ONE_BYTE_ARGUMENT[code](self, arg)
                continue
            if code == _SHORT_BINUNICODE and pos + 2 <= end:
                stop = pos + 2 + data[pos + 1]
                if stop <= end and not pos + 2 < frame_end < stop:
                    try:
                        push(str(data[pos + 2:stop], "utf-8", "surrogatepass"))
                        pos = stop
                        continue
                    except UnicodeDecodeError:
                        pass  # read again below, which says what is wrong
            elif code == _BININT2 and pos + 3 <= end and frame_end != pos + 2:
                push(data[pos + 1] | data[pos + 2] << 8)
                pos += 3
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
