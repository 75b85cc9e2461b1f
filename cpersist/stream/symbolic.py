"""The opcodes of the symbolic stack machine :func:`cpersist.stream.opcodes.walk` runs.

Each handler of :data:`HANDLERS` applies one pickle opcode to a symbolic
stack and memo as the unpickler would, importing and calling nothing (the
walk's loop runs the literals, MARK, MEMOIZE, the memo's gets, TUPLE1 and
STOP itself): it records what loading
would resolve (the globals named by ``GLOBAL``, ``INST`` and
``STACK_GLOBAL``, copyreg extension codes, the protocol) and builds a tree
of the containers and calls that hold the format's array calls, from which
:mod:`cpersist.stream.paths` tells where each array sits. Literals (numbers,
strings, short bytes) sit on the stack as themselves, and tuples as Python
tuples of what they hold (a dump makes one per array call, so they are kept
as cheap as they can be); everything else is a :class:`Node`.
"""

import pickletools

from ..format import names
from . import MAX_KEPT_BYTES
from .args import by_code

_MARK = object()    # a MARK on the stack
_OPAQUE = object()  # a literal not kept: long bytes (inline array data) would stay in memory

_STORED_ARRAY, _INLINE_ARRAY, _REBUILD_VIEW, _REBUILD_MASKED, _REBUILD_TENSOR, _REBUILD_JAX = (
    names.split(n) for n in (names.STORED_ARRAY, names.INLINE_ARRAY, names.REBUILD_VIEW,
                             names.REBUILD_MASKED, names.REBUILD_TENSOR, names.REBUILD_JAX))

#: Opcodes pushing their argument as the value the unpickler would push
#: (the walk's loop pushes them).
LITERALS = frozenset((
    "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
    "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "SHORT_BINUNICODE", "BINUNICODE",
    "BINUNICODE8",
))
_BYTES = frozenset(("BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8"))


class Node:
    """A value on the symbolic stack that is not a literal."""

    __slots__ = ("kind", "value", "children", "count", "items", "state")

    #: Nodes made so far in the process (what a walk's limits count).
    made = 0
    #: :attr:`made` past which copying children refuses at once (set by a walk):
    #: BUILD or a call can copy a memoized dict or tuple in a few opcodes.
    ceiling = 1 << 62

    def __init__(self, kind, value=None):
        Node.made += 1
        self.kind = kind          # global, dict, list, set, call, array, inline, buffer, other
        self.value = value        # global: (module, name); call: its callable;
        #                           array: section number; inline: its args tuple;
        #                           buffer: its number
        self.children = []        # (label, node) for children that may hold arrays
        self.count = 0            # list: items appended so far
        self.items = ()           # call: the arguments
        self.state = None         # call: what BUILD gave it

    def add(self, label, child):
        if type(child) is Node or type(child) is tuple:
            self.children.append((label, child))


class ObjectsExceeded(Exception):
    """A step would make the walk hold more than :attr:`Node.ceiling` objects."""


def _charge(count):
    """Count ``count`` children copied from another node as made objects."""
    Node.made += count
    if Node.made > Node.ceiling:
        raise ObjectsExceeded


def tuple_children(members):
    """``(label, member)`` of the members of a tuple that may hold arrays."""
    _charge(len(members))  # a memoized tuple may be copied by call after call
    return [(f"[{i}]", member) for i, member in enumerate(members)
            if type(member) is Node or type(member) is tuple]


def _top(stack):
    """The value on top of the stack, as PUT and DUP see it."""
    if stack and stack[-1] is not _MARK:
        return stack[-1]
    return Node("other")


def _pop(stack):
    return stack.pop() if stack else Node("other")


def _target(stack):
    """The container or object on top of the stack that an opcode fills in."""
    top = stack[-1] if stack else None
    return top if type(top) is Node else Node("other")


def _pop_mark(stack):
    """The items above the topmost MARK, which is removed with them."""
    items = []
    while stack:
        item = stack.pop()
        if item is _MARK:
            break
        items.append(item)
    items.reverse()
    return items


def _generic(name):
    """The handler of an opcode not modelled, which keeps the stack's shape:
    its results are "other"."""
    op = next(op for op in pickletools.opcodes if op.name == name)
    before = op.stack_before
    marked = pickletools.markobject in before
    n = before.index(pickletools.markobject) if marked else len(before)

    def keep_shape(result, stack, memo, arg):
        if marked:
            _pop_mark(stack)
        if n:
            del stack[max(0, len(stack) - n):]
        stack.extend(Node("other") for _ in op.stack_after)
    return keep_shape


def _key_label(key):
    if type(key) is str or type(key) is bytes:
        return f"[{key!r}]" if len(key) <= MAX_KEPT_BYTES else "[?]"
    if isinstance(key, (str, int, float, bytes, bool)):
        return f"[{key!r}]"
    return "[?]"


def _proto(result, stack, memo, arg):
    result.protocol = max(result.protocol, arg)


def _frame(result, stack, memo, arg):
    pass


def _put(result, stack, memo, arg):
    memo[arg] = _top(stack)


def _pop_one(result, stack, memo, arg):
    if stack:
        stack.pop()  # a MARK on top is what POP removes then


def _pop_to_mark(result, stack, memo, arg):
    _pop_mark(stack)


def _dup(result, stack, memo, arg):
    stack.append(_top(stack))


def _bytes(result, stack, memo, arg):
    kept = type(arg) is bytes and len(arg) <= MAX_KEPT_BYTES
    stack.append(arg if kept else _OPAQUE)


def _bool(value):  # and None, and the empty tuple
    def push(result, stack, memo, arg):
        stack.append(value)
    return push


def _empty(kind):
    def push(result, stack, memo, arg):
        stack.append(Node(kind))
    return push


def _dict(result, stack, memo, arg):
    node = Node("dict")
    items = _pop_mark(stack)
    for key, value in zip(items[0::2], items[1::2]):
        node.add(_key_label(key), value)
    stack.append(node)


def _sequence(kind):
    def build(result, stack, memo, arg):
        items = _pop_mark(stack)
        if kind == "tuple":
            stack.append(tuple(items))
            return
        node = Node(kind)
        for i, item in enumerate(items):
            node.add(f"[{i}]", item)
        node.count = len(items)
        stack.append(node)
    return build


def _tuple_n(size):
    def build(result, stack, memo, arg):
        if len(stack) >= size:
            items = tuple(stack[-size:])
            del stack[-size:]
        else:
            items = tuple(Node("other") for _ in range(size - len(stack))) + tuple(stack)
            del stack[:]
        stack.append(items)
    return build


def _append_to(target, values):
    for value in values:
        target.add(f"[{target.count}]", value)
        target.count += 1


def _append(result, stack, memo, arg):
    value = _pop(stack)
    _append_to(_target(stack), [value])


def _appends(result, stack, memo, arg):
    values = _pop_mark(stack)
    _append_to(_target(stack), values)


def _setitem(result, stack, memo, arg):
    value = _pop(stack)
    key = _pop(stack)
    target = stack[-1] if stack else None
    # Labelled only when it is kept: most values of a big dict are literals.
    if type(target) is Node and (type(value) is Node or type(value) is tuple):
        target.children.append((_key_label(key), value))


def _setitems(result, stack, memo, arg):
    items = _pop_mark(stack)
    target = stack[-1] if stack else None
    if type(target) is Node:
        for key, value in zip(items[0::2], items[1::2]):
            if type(value) is Node or type(value) is tuple:
                target.children.append((_key_label(key), value))


def _additems(result, stack, memo, arg):
    _pop_mark(stack)  # set members are hashable, so never arrays


def _global(result, stack, memo, arg):
    module, _, attr = arg.partition(" ")
    result.globals.add(f"{module}.{attr}")
    stack.append(Node("global", (module, attr)))


def _stack_global(result, stack, memo, arg):
    attr = _pop(stack)
    module = _pop(stack)
    if type(module) is str and type(attr) is str:
        result.globals.add(f"{module}.{attr}")
        stack.append(Node("global", (module, attr)))
    else:
        result.unresolved += 1  # a restricted load still checks it when resolving
        stack.append(Node("other"))


def _inst(result, stack, memo, arg):
    module, _, attr = arg.partition(" ")
    result.globals.add(f"{module}.{attr}")
    _obj_call(Node("global", (module, attr)), _pop_mark(stack), stack)


def _obj(result, stack, memo, arg):
    items = _pop_mark(stack)
    _obj_call(items[0] if items else Node("other"), items[1:], stack)


def _obj_call(func, args, stack):
    node = Node("call", func)
    for i, item in enumerate(args):
        node.add(f"<arg{i}>", item)
    stack.append(node)


def _reduce(result, stack, memo, arg):
    if len(stack) > 1:
        args = stack.pop()
        stack[-1] = _call(stack[-1], args)
    else:
        args = _pop(stack)
        stack.append(_call(_pop(stack), args))


def _newobj_ex(result, stack, memo, arg):
    _pop(stack)  # kwargs
    _reduce(result, stack, memo, arg)


def _build(result, stack, memo, arg):
    state = _pop(stack)
    obj = _target(stack)
    obj.state = state
    # ``obj.__setstate__(state)``: a dict state (or (dict, slots)) sets attributes.
    parts = [state]
    if type(state) is tuple and len(tuple_children(state)) <= 2:
        parts = [child for _, child in tuple_children(state)]
    for part in parts:
        if type(part) is Node and part.kind == "dict":
            children = list(part.children)  # the state may be ``obj`` itself
            _charge(len(children))
            for label, child in children:
                key = label[2:-2] if label.startswith("['") and label.endswith("']") else None
                if key is not None and key.isidentifier():
                    obj.add(f".{key}", child)
                else:
                    obj.add(f".__dict__{label}", child)
        else:
            obj.add("<state>", part)


def _next_buffer(result, stack, memo, arg):
    """NEXT_BUFFER: the file's next out-of-band buffer, numbered in stream order."""
    stack.append(Node("buffer", result.buffers))
    result.buffers += 1


def _readonly_buffer(result, stack, memo, arg):
    pass  # the same bytes, read-only


def _ext(result, stack, memo, arg):
    result.extension_codes.append(arg)
    stack.append(Node("other"))


def _call(func, args):
    """The node of ``func(*args)``; the format's own calls become array nodes."""
    target = func.value if type(func) is Node and func.kind == "global" else None
    is_tuple = type(args) is tuple
    if target == _STORED_ARRAY:
        section = args[0] if is_tuple and args else None
        if type(section) is int:
            return Node("array", section)
    if target == _INLINE_ARRAY:
        return Node("inline", args)
    node = Node("call", func)
    node.items = args if is_tuple else ()  # a dtype's are read back
    if not is_tuple:
        node.add("<args>", args)
    elif target == _REBUILD_VIEW or target == _REBUILD_TENSOR or target == _REBUILD_JAX:
        # (base, cls, state): the subclass instance is its base array; a
        # tensor's first argument is its storage's array; a JAX array's,
        # its data (or the tuple of its shards' data).
        for label, child in tuple_children(args):
            node.add("" if label == "[0]" else f"<arg{label[1:-1]}>", child)
    elif target == _REBUILD_MASKED:
        # (cls, data, mask, fill_value, hard_mask)
        for label, child in tuple_children(args):
            node.add({"[1]": "", "[2]": ".mask"}.get(label, f"<arg{label[1:-1]}>"), child)
    else:
        for label, child in tuple_children(args):
            node.add(f"<arg{label[1:-1]}>", child)
    return node


#: The handler of each opcode the walk's loop does not run itself, by opcode byte.
HANDLERS = by_code({
    "PROTO": _proto, "FRAME": _frame,
    "PUT": _put, "BINPUT": _put, "LONG_BINPUT": _put,
    "POP": _pop_one, "POP_MARK": _pop_to_mark, "DUP": _dup,
    "NONE": _bool(None), "NEWTRUE": _bool(True), "NEWFALSE": _bool(False),
    **{name: _bytes for name in _BYTES},
    **{f"EMPTY_{kind.upper()}": _empty(kind) for kind in ("dict", "list", "set")},
    "EMPTY_TUPLE": _bool(()),
    "DICT": _dict, "LIST": _sequence("list"), "TUPLE": _sequence("tuple"),
    "FROZENSET": _sequence("set"),
    "TUPLE2": _tuple_n(2), "TUPLE3": _tuple_n(3),
    "APPEND": _append, "APPENDS": _appends, "SETITEM": _setitem, "SETITEMS": _setitems,
    "ADDITEMS": _additems,
    "GLOBAL": _global, "STACK_GLOBAL": _stack_global, "INST": _inst, "OBJ": _obj,
    "REDUCE": _reduce, "NEWOBJ": _reduce, "NEWOBJ_EX": _newobj_ex, "BUILD": _build,
    "EXT1": _ext, "EXT2": _ext, "EXT4": _ext,
    "NEXT_BUFFER": _next_buffer, "READONLY_BUFFER": _readonly_buffer,
    **{name: _generic(name) for name in ("PERSID", "BINPERSID")},
})
