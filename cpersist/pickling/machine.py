"""The state of one restricted load (:mod:`.restricted`): its stack, marks
and memo, the budget of :class:`~cpersist.Limits` it charges as it goes,
and what the stream made, may still change and may call.

The opcodes (:mod:`.restricted_ops`) and the builders (:mod:`.builders`)
work on it through its methods: the stack's one underflow check
(:meth:`Machine.need`), the budget (:meth:`Machine.alloc`,
:meth:`Machine.made`, :meth:`Machine.nested`, :meth:`Machine.key`) and the
calls (:meth:`Machine.call`), which resolve only through the allowlist.
"""

import time

from ..exceptions import UntrustedObjectError
from ..format.limits import STR_HASH_PREDICTABLE, exceeded
from ..stream.args import StreamError
from .allowlist import TRUSTED, VALUE
from .checks import Refused, as_dtype, brief

#: What the C unpickler says of an opcode that takes more than the stack holds.
UNDERFLOW = "unpickling stack underflow"
#: Types whose hash recurses into their items.
NESTING = frozenset((tuple, frozenset))
#: Ints below this hash to themselves: no two collide.
_DISTINCT_HASH = 1 << 60
#: Keys of one set or dict that may share a hash (no two do by chance).
_SAME_HASH = 16
#: Key types whose hash the stream cannot choose (None: it can).
_SECRET_STR, _SECRET_BYTES = (None, None) if STR_HASH_PREDICTABLE else (str, bytes)
#: Containers whose keys ``in`` finds without running a stream's code.
_PLAIN_KEYED = frozenset((dict, set))
#: What the id tables give for an object they do not hold: never an object a
#: stream can push (``None`` is one).
_ABSENT = object()
#: Opcodes run between two looks at the clock.
_CLOCK_EVERY = 1 << 14
#: What an inline array may view rather than copy.
_VIEWED = (bytearray, memoryview)


class Machine:
    """What one restricted load has built and spent: the stack, the marks
    and the memo the opcodes of :mod:`.restricted_ops` work on, the budget
    they charge, and what the stream may still change or call.

    Parameters
    ----------
    data : bytes or bytearray
        The stream (a bytearray is never written to here).
    resolve : callable
        ``resolve(module, name) -> (object, builder)``: the allowlist.
    persistent_load : callable
    limits : cpersist.Limits
    source : str
    dry : bool
        Stored arrays are stand-ins: build no tensor, copy no array.
    buffers : sequence of memoryview, optional
        The file's out-of-band buffers, in stream order (contiguous, none
        overlapping another, nothing else viewing them).
    """

    def __init__(self, data, resolve, persistent_load, limits, source, dry=False,
                 buffers=None):
        self.data = data
        self._resolve = resolve
        self.persistent_load = persistent_load
        self.limits = limits
        self.source = source
        self.dry = dry
        self.new_dtypes = {}  # id -> dtype made here and not yet given a state
        self._targets = {}    # id -> object the stream made and may still fill in
        self._callables = {}  # id -> (global, its builder, its name)
        self._stored = {}     # id -> array of a section
        self._loose = {}      # id -> bytearray of BYTEARRAY8 held at one place
        self._taken = {}      # id -> bytearray an inline array views
        self._dtypes = {}     # id -> dtype checked that the stream can no longer change
        self._depths = {}     # id -> (tuple or frozenset, nesting) when nested
        self._hashes = {}     # id -> (set or dict, {hash: keys of it}) of odd keys
        self._objects = 0
        self._alloc = 0
        self._budget = limits.max_alloc_bytes + 16 * len(data)
        self._deadline = time.monotonic() + limits.max_seconds
        self._max_int_bits = int(limits.max_digits * 3.33) + 8
        self.stack = []
        self.marks = []  # where each MARK left the stack, the topmost last
        self.memo = {}
        self.protocol = 0  # of the last PROTO
        self._buffers = () if buffers is None else list(buffers)
        self._next_buffer = 0
        for number, buffer in enumerate(self._buffers):
            if type(buffer) is not memoryview or not buffer.contiguous:
                raise TypeError(f"buffers must be contiguous memoryviews, not {brief(buffer)}")
            if buffer.format != "B" or buffer.ndim != 1:  # len() counts its bytes
                self._buffers[number] = buffer.cast("B")

    # -- the stack: the one underflow check ------------------------------------
    def need(self, n):
        """Refuse an opcode that takes ``n`` items when fewer lie above the
        topmost MARK (the C unpickler's fence)."""
        if len(self.stack) - n < (self.marks[-1] if self.marks else 0):
            raise StreamError(UNDERFLOW)

    def pop(self):
        self.need(1)
        return self.stack.pop()

    def pop_mark(self):
        """The items above the topmost MARK, removed with it."""
        if not self.marks:
            raise StreamError("could not find MARK")
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def below(self, start):
        """The object an opcode fills with the items from ``start`` on (its
        MARK's place): the one below them, which must exist."""
        if start <= 0 or start > len(self.stack):
            raise StreamError(UNDERFLOW)
        return self.stack[start - 1]

    # -- the budget ----------------------------------------------------------
    def alloc(self, nbytes):
        """Charge ``nbytes`` to the load, before they are allocated."""
        self._alloc += nbytes
        if self._alloc > self._budget:
            raise exceeded("max_alloc_bytes", self._alloc, self.limits, self.source,
                           "allocates at least {} bytes (beyond 16 per byte of its stream)")

    def made(self):
        """Count one more object built (a container, a call, a memo entry)."""
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

    def check_clock(self, opcodes):
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
            if type(item) in NESTING:
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
        (strings and bytes hash with the process's secret, unless it is fixed,
        small ints to themselves; numbers, tuples and the rest can be forged
        to collide). A key already in it adds no entry and is not counted."""
        kind = type(key)
        if kind is _SECRET_STR or kind is _SECRET_BYTES or key is None or kind is bool or (
                kind is int and -_DISTINCT_HASH < key < _DISTINCT_HASH):
            return
        if kind is memoryview:
            # No dump keys by a buffer (a PickleBuffer hashes by identity,
            # which no load keeps); hashing or comparing a view costs its
            # length, not one step.
            raise Refused("an out-of-band buffer as a key of a set or dict")
        try:
            value = hash(key)
        except TypeError:
            raise Refused(f"an unhashable key ({brief(key)})") from None
        if type(container) in _PLAIN_KEYED and key in container:
            return  # no new entry, no longer chain of equal hashes
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

    def settled(self, obj):
        """``obj``, which the stream could fill in, may no longer be changed."""
        del self._targets[id(obj)]

    def is_global(self, obj):
        """Whether ``obj`` is a global the stream named."""
        entry = self._callables.get(id(obj))
        return entry is not None and entry[0] is obj

    def is_trusted(self, obj):
        """Whether ``obj`` is a global the caller trusts (no allowlist row)."""
        entry = self._callables.get(id(obj))
        return entry is not None and entry[0] is obj and entry[1] is TRUSTED

    def made_dtype(self, dtype):
        self.new_dtypes[id(dtype)] = dtype
        return dtype

    def dtype(self, value):
        """:func:`.checks.as_dtype` of ``value``; a dtype object is checked
        once while the stream can no longer change it (its state given, or
        not one the stream made): a model's hundreds of arrays share a few."""
        if self._dtypes.get(id(value)) is value:
            return value
        dtype = as_dtype(value)
        if dtype is value and self.new_dtypes.get(id(value)) is not value:
            self._dtypes[id(value)] = value
        return dtype

    def stored(self, arr):
        self._stored[id(arr)] = arr
        return arr

    def is_stored(self, arr):
        return self._stored.get(id(arr), _ABSENT) is arr

    def target(self, obj, action):
        """Refuse to change ``obj`` unless the stream made it and still holds it."""
        if self._targets.get(id(obj), _ABSENT) is not obj:
            raise UntrustedObjectError(
                type(obj).__module__, type(obj).__qualname__, self.source,
                reason=f"the pickle stream tried to change it ({action}); restricted loads "
                       f"only fill in objects the stream made and has not handed on",
                remedy="load it with trusted=True only if you trust this file")
        return obj

    # -- the bytearrays and buffers inline arrays view -------------------------
    # A BYTEARRAY8's bytearray is a copy of the stream's bytes, which no
    # opcode or builder changes; an out-of-band buffer (NEXT_BUFFER) is the
    # file's own memory, which nothing else views. An inline array views
    # either instead of a copy of its own when nothing else holds it but the
    # memo and the tuple of the array's arguments. It is pushed once; another
    # place could hold it only once it is pushed again (from the memo, by
    # DUP, or returned by a call), and so could its arguments' tuple, which
    # holds it first: either pushed again, it is copied for the array. Once
    # an array views it, the stream reaches it, or that tuple, only from the
    # memo, and is given a copy: nothing the load gives back writes into
    # what an array views.
    def made_buffer(self, buffer):
        """``buffer``, just made by BYTEARRAY8 or taken by NEXT_BUFFER."""
        self._loose[id(buffer)] = buffer
        return buffer

    def take_buffer(self, buffer):
        """Whether an inline array may view ``buffer``, the first of its call's
        arguments, rather than a copy of it; if so, it is the array's."""
        if self._loose.pop(id(buffer), None) is not buffer:
            return False
        self._taken[id(buffer)] = buffer
        return True

    def again(self, value):
        """``value``, pushed again: from the memo, by DUP, or returned by a
        call. A bytearray or buffer (alone, or first of four in a tuple, as
        an inline array's arguments) is no longer held at one place, and one
        an array views is given as a copy."""
        kind = type(value)
        if kind is bytearray or kind is memoryview:
            buffer = value
        elif kind is tuple and len(value) == 4 and type(value[0]) in _VIEWED:
            buffer = value[0]
        else:
            return value
        key = id(buffer)
        if self._loose.get(key) is buffer:
            del self._loose[key]
        elif self._taken.get(key) is buffer:
            self.made()
            self.alloc(len(buffer))  # made here: a bytearray, or a view of bytes
            # Held at this one place: an array may view it.
            copy = self.made_buffer(bytearray(buffer) if type(buffer) is bytearray
                                    else memoryview(bytearray(buffer)))
            return copy if value is buffer else self.nested((copy,) + value[1:])
        return value

    def next_buffer(self):
        """NEXT_BUFFER: the file's next out-of-band buffer."""
        if self.protocol < 5:
            # The C unpickler takes one at any protocol, but no pickler
            # writes one below 5: a stream that says otherwise is forged.
            raise StreamError(f"out-of-band data in a stream of protocol {self.protocol}")
        if self._next_buffer >= len(self._buffers):
            raise StreamError(f"the stream asks for more out-of-band buffers than the "
                              f"file holds ({len(self._buffers)})")
        buffer = self._buffers[self._next_buffer]
        self._next_buffer += 1
        return self.made_buffer(buffer)

    def read_only(self, buffer):
        """READONLY_BUFFER of ``buffer`` (a memoryview): a read-only view of
        it, as the C unpickler gives, which inline arrays copy. ``buffer`` is
        no longer held at one place."""
        if buffer.readonly:
            return buffer
        self.made()
        if self._loose.get(id(buffer)) is buffer:
            del self._loose[id(buffer)]
        return buffer.toreadonly()

    def unused_buffers(self):
        """How many of the file's buffers the stream did not take."""
        return len(self._buffers) - self._next_buffer

    # -- calls --------------------------------------------------------------
    def call(self, func, args, kwargs=None, new=False):
        self.made()
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
            return self.made_target(self.again(made))
        if builder is VALUE:
            module, _, name = entry[2].rpartition(".")
            raise UntrustedObjectError(
                module, name, self.source,
                reason="restricted loads take it as a value, never call it",
                remedy="load it with trusted=True only if you trust this file")
        return self.again(builder(self, func, args, kwargs, new))

    def instantiate(self, cls, args):
        if not args and isinstance(cls, type) and not hasattr(cls, "__getinitargs__"):
            return self.call(cls, (), None, new=True)
        return self.call(cls, tuple(args))

    def named_global(self, module, name):
        obj, builder = self._resolve(module, name)
        self._callables[id(obj)] = (obj, builder, f"{module}.{name}")
        return obj

    @staticmethod
    def on_protocol(protocol):
        """Told each PROTO (the unpickler resolves dotted names from 4 on)."""
