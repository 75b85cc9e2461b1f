"""The restricted load: a pickle machine that builds data.

``trusted=False`` (or an allowlist) loads with :class:`Machine` instead of
the C unpickler. It reads opcodes with :mod:`cpersist.stream.args` (as the
C unpickler reads them) and executes them itself, so that every step a
stream asks for is decided here:

* A global is resolved only if :data:`.allowlist.ALLOWED` lists it (or the
  caller trusts it), and a call only through its row's builder
  (:mod:`.builders`), which checks the arguments and builds a fresh value:
  arrays are copies of immutable bytes or zero-filled, never views of
  something the stream can still change. Copyreg extension codes and
  persistent ids are refused.
* ``BUILD``, ``SETITEM``, ``APPEND`` and ``ADDITEMS`` change only objects the
  stream made (plain containers, and what a builder marks as fillable), and
  only until the object is handed to a call (it is then consumed).
* One budget per load (:class:`~cpersist.Limits`): opcodes, objects, bytes
  allocated by every builder and container, the nesting of tuples and
  frozensets, digits, and a deadline, counted as the machine goes so that
  an opcode that would exceed one is refused before it runs. Keys of sets
  and dicts are checked as they go in, so that colliding hashes cannot make
  filling them quadratic.
* A dry run (``dry=True``) runs the same machine over stand-ins of the
  stored arrays, building no tensor and copying no array, to tell whether a
  restricted load accepts a file.
"""

import pickle
import time

from .._runtime.gc import collector_paused
from ..exceptions import CorruptFileError, CpersistError, UntrustedObjectError
from ..stream.args import StreamError, next_frame_end, read_in_frame
from .allowlist import TRUSTED, VALUE
from .checks import Refused, brief
from ..format.limits import exceeded
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
#: Types whose hash recurses into their items.
_NESTING = frozenset((tuple, frozenset))
#: Ints below this hash to themselves: no two collide.
_DISTINCT_HASH = 1 << 60
#: Keys of one set or dict that may share a hash (no two do by chance).
_SAME_HASH = 16
#: Opcodes run between two looks at the clock.
_CLOCK_EVERY = 1 << 14


class Machine(Opcodes):
    """Executes one pickle stream under the restricted load's checks.

    Parameters
    ----------
    data : bytes
    resolve : callable
        ``resolve(module, name) -> (object, builder)``: the allowlist.
    persistent_load : callable
    limits : cpersist.Limits
    source : str
    dry : bool
        Stored arrays are stand-ins: build no tensor, copy no array.
    """

    def __init__(self, data, resolve, persistent_load, limits, source, dry=False):
        self.data = data
        self._resolve = resolve
        self._persistent_load = persistent_load
        self.limits = limits
        self.source = source
        self.dry = dry
        self.new_dtypes = {}  # id -> dtype made here and not yet given a state
        self._targets = {}    # id -> object the stream made and may still fill in
        self._callables = {}  # id -> (global, its builder, its name)
        self._stored = {}     # id -> array of a section
        self._depths = {}     # id -> (tuple or frozenset, nesting) when nested
        self._hashes = {}     # id -> (set or dict, {hash: keys of it}) of odd keys
        self._objects = 0
        self._alloc = 0
        self._budget = limits.max_alloc_bytes + 16 * len(data)
        self._deadline = time.monotonic() + limits.max_seconds
        self._max_int_bits = int(limits.max_digits * 3.33) + 8
        self.stack = []
        self.marks = []
        self.memo = {}

    # -- the budget ----------------------------------------------------------
    def alloc(self, nbytes):
        """Charge ``nbytes`` to the load, before they are allocated."""
        self._alloc += nbytes
        if self._alloc > self._budget:
            raise exceeded("max_alloc_bytes", self._alloc, self.limits, self.source,
                           "allocates at least {} bytes (beyond 16 per byte of its stream)")

    def _made(self):
        self._objects += 1
        if self._objects > self.limits.max_objects:
            self.too_many_objects(self._objects, "builds at least {} objects")

    def too_many_objects(self, count, what):
        raise exceeded("max_objects", count, self.limits, self.source, what)

    def too_many_digits(self, count, what):
        raise exceeded("max_digits", count, self.limits, self.source, what)

    def check_int(self, value):
        if value.bit_length() > self._max_int_bits:
            self.too_many_digits(int(value.bit_length() / 3.33),
                                 "writes an integer of about {} digits")

    def _check_clock(self, opcodes):
        """Refuse past ``max_opcodes`` or the deadline; when to look again."""
        if opcodes > self.limits.max_opcodes:
            raise exceeded("max_opcodes", opcodes, self.limits, self.source,
                           "runs at least {} opcodes")
        if time.monotonic() > self._deadline:
            raise exceeded("max_seconds", self.limits.max_seconds, self.limits, self.source,
                           "runs longer than {} seconds")
        return min(opcodes + _CLOCK_EVERY, self.limits.max_opcodes + 1)

    def nested(self, made):
        """Record how deeply the tuple or frozenset ``made`` nests; refuse
        past ``max_depth`` (its hash would recurse that deep in C)."""
        depth = 1
        depths = self._depths
        for item in made:
            if type(item) in _NESTING:
                known = depths.get(id(item))
                inner = known[1] if known is not None and known[0] is item else 1
                if inner >= depth:
                    depth = inner + 1
        if depth > 1:
            if depth > self.limits.max_depth:
                raise exceeded("max_depth", depth, self.limits, self.source,
                               "nests tuples or frozensets {} deep")
            depths[id(made)] = (made, depth)
        return made

    def key(self, container, key):
        """Check ``key`` before it goes into the set or dict ``container``:
        hashable, and sharing its hash with few others of the container
        (strings and bytes hash with the process's secret, small ints to
        themselves; numbers, tuples and the rest can be forged to collide)."""
        kind = type(key)
        if kind is str or kind is bytes or key is None or kind is bool or (
                kind is int and -_DISTINCT_HASH < key < _DISTINCT_HASH):
            return
        try:
            value = hash(key)
        except TypeError:
            raise Refused(f"an unhashable key ({brief(key)})") from None
        seen = self._hashes.get(id(container))
        if seen is None or seen[0] is not container:
            seen = self._hashes[id(container)] = (container, {})
        count = seen[1].get(value, 0) + 1
        if count > _SAME_HASH:
            raise Refused(f"more than {_SAME_HASH} keys of one container with the same "
                          f"hash (a collision flood)")
        seen[1][value] = count

    # -- what the stream made ------------------------------------------------------
    def made_target(self, obj):
        """``obj``, which the stream may fill in until it hands it to a call."""
        self._targets[id(obj)] = obj
        return obj

    made_array = made_target  # an array: given its state once by BUILD

    def is_trusted(self, obj):
        """Whether ``obj`` is a global the caller trusts (no allowlist row)."""
        entry = self._callables.get(id(obj))
        return entry is not None and entry[0] is obj and entry[1] is TRUSTED

    def made_dtype(self, dtype):
        self.new_dtypes[id(dtype)] = dtype
        return dtype

    def stored(self, arr):
        self._stored[id(arr)] = arr
        return arr

    def is_stored(self, arr):
        return self._stored.get(id(arr)) is arr

    def target(self, obj, action):
        """Refuse to change ``obj`` unless the stream made it and still holds it."""
        if self._targets.get(id(obj)) is not obj:
            raise UntrustedObjectError(
                type(obj).__module__, type(obj).__qualname__, self.source,
                reason=f"the pickle stream tried to change it ({action}); restricted loads "
                       f"only fill in objects the stream made and has not handed on",
                remedy="load it with trusted=True only if you trust this file")
        return obj

    # -- calls --------------------------------------------------------------
    def call(self, func, args, kwargs=None, new=False):
        self._made()
        entry = self._callables.get(id(func))
        if entry is None or entry[0] is not func:
            raise Refused(f"a call of {brief(func)}, which is no global the stream named")
        builder = entry[1]
        targets = self._targets
        if targets:  # what a call is handed, the stream may no longer change
            for value in args:
                targets.pop(id(value), None)
            if kwargs:
                for value in kwargs.values():
                    targets.pop(id(value), None)
        kwargs = kwargs or {}
        if builder is TRUSTED:
            made = func.__new__(func, *args, **kwargs) if new else func(*args, **kwargs)
            return self.made_target(made)
        if builder is VALUE:
            module, _, name = entry[2].rpartition(".")
            raise UntrustedObjectError(
                module, name, self.source,
                reason="restricted loads take it as a value, never call it",
                remedy="load it with trusted=True only if you trust this file")
        return builder(self, func, args, kwargs, new)

    def _instantiate(self, cls, args):
        if not args and isinstance(cls, type) and not hasattr(cls, "__getinitargs__"):
            return self.call(cls, (), None, new=True)
        return self.call(cls, tuple(args))

    def _global(self, module, name):
        obj, builder = self._resolve(module, name)
        self._callables[id(obj)] = (obj, builder, f"{module}.{name}")
        return obj

    # -- the run ------------------------------------------------------------
    def run(self):
        data = self.data
        end = len(data)
        pos = 0
        opcodes = 0
        check_at = self._check_clock(0)
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
            if opcodes >= check_at:
                check_at = self._check_clock(opcodes)
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
                    # Only a tuple holding a tuple or frozenset nests: flat
                    # ones, most of some streams, skip the call.
                    if type(items[0]) in _NESTING or n == 2 and type(items[1]) in _NESTING:
                        self.nested(items)
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
                    self.check_int(arg)
                push(arg)

    # -- opcodes ------------------------------------------------------------


def run(data, resolve, persistent_load, limits, source, on_protocol=None, dry=False):
    """Execute the pickle stream ``data`` under the checks; its object
    (see :class:`Machine` for the arguments).

    Raises
    ------
    UntrustedObjectError, LimitExceededError
    CorruptFileError
        For a malformed stream, a forged numpy description, or any call of
        the stream failing (the message names the cause).
    """
    machine = Machine(data, resolve, persistent_load, limits, source, dry)
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
        raise CorruptFileError(f"{source}: the pickle stream asks for what a restricted "
                               f"load refuses: {exc}") from None
    except RecursionError:
        raise CorruptFileError(f"{source}: the pickle stream nests objects too deeply") from None
    except Exception as exc:
        raise CorruptFileError(
            f"{source}: the pickle stream could not be loaded ({type(exc).__name__}: "
            f"{str(exc)[:200]})") from exc
