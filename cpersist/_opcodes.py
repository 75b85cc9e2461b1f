"""Walk a pickle stream's opcodes symbolically, importing and calling nothing.

:func:`walk` reads a stream once with :func:`pickletools.genops`, keeping one
symbolic stack and one memo, and records at the same time what loading it
would resolve (the globals named by ``GLOBAL``, ``INST`` and ``STACK_GLOBAL``,
copyreg extension codes, the protocol) and a tree of the containers and calls
that hold the format's array calls, from which :mod:`cpersist._paths` tells
where each array sits. Literals (numbers, strings, short bytes) sit on the
stack as themselves, and tuples as Python tuples of what they hold (a dump
makes one per array call, so they are kept as cheap as they can be);
everything else is a :class:`Node`.
"""

import io
import pickletools
import struct

from . import _format_names as names
from ._gc import collector_paused

_MARK = object()    # a MARK on the stack
_OPAQUE = object()  # a literal not kept: long bytes (inline array data) would stay in memory

_STORED_ARRAY = names.split(names.STORED_ARRAY)
_INLINE_ARRAY = names.split(names.INLINE_ARRAY)
_REBUILD_VIEW = names.split(names.REBUILD_VIEW)
_REBUILD_MASKED = names.split(names.REBUILD_MASKED)

#: Opcodes pushing their argument as the value the unpickler would push.
_LITERALS = frozenset((
    "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
    "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "SHORT_BINUNICODE", "BINUNICODE",
    "BINUNICODE8", "NONE",
))
_BYTES = frozenset(("BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8"))
#: Longer bytes are never shown as a dict key, so they are not kept.
MAX_KEPT_BYTES = 200


class Node:
    """A value on the symbolic stack that is not a literal."""

    __slots__ = ("kind", "value", "children", "count", "items", "state")

    def __init__(self, kind, value=None):
        self.kind = kind          # global, dict, list, set, call, array, inline, other
        self.value = value        # global: (module, name); call: its callable;
        #                           array: section number; inline: its args tuple
        self.children = []        # (label, node) for children that may hold arrays
        self.count = 0            # list: items appended so far
        self.items = ()           # call: the arguments
        self.state = None         # call: what BUILD gave it

    def add(self, label, child):
        if type(child) is Node or type(child) is tuple:
            self.children.append((label, child))


def tuple_children(members):
    """``(label, member)`` of the members of a tuple that may hold arrays."""
    return [(f"[{i}]", member) for i, member in enumerate(members)
            if type(member) is Node or type(member) is tuple]


class Walk:
    """What :func:`walk` found.

    Attributes
    ----------
    protocol : int
        The highest ``PROTO`` (0 when absent).
    globals : set of str
        ``"module.name"`` of every global the stream names, the format's
        ``stored_array`` included.
    unresolved : int
        ``STACK_GLOBAL`` opcodes whose strings are computed at load time.
    extension_codes : list of int
        Codes of ``EXT*`` opcodes, in stream order.
    top : Node or None
        The object the stream builds, as a tree.
    error : str or None
        Why :func:`pickletools.genops` stopped early, for a malformed stream;
        what precedes the problem is recorded.
    """

    __slots__ = ("protocol", "globals", "unresolved", "extension_codes", "top", "error")

    def __init__(self):
        self.protocol = 0
        self.globals = set()
        self.unresolved = 0
        self.extension_codes = []
        self.top = None
        self.error = None


def walk(data):
    """Walk the pickle stream ``data`` (bytes-like) once; never raises on bad input.

    Returns
    -------
    Walk
    """
    result = Walk()
    stack = []
    memo = {}
    if type(data) is not bytes:
        data = bytes(data)
    try:
        with collector_paused():
            _run(data, result, stack, memo)
    except (ValueError, EOFError) as exc:  # the errors genops gives on malformed streams
        result.error = str(exc)
    if result.top is None and stack and type(stack[-1]) in (Node, tuple):
        result.top = stack[-1]  # a stream ending early: what was built so far
    return result


def step(result, stack, memo, name, arg):
    """Apply one opcode, named as :mod:`pickletools` names it, with its argument."""
    if name in _LITERALS:
        stack.append(arg)
    elif name == "MEMOIZE":
        memo[len(memo)] = _top(stack)
    elif name == "BINGET" or name == "LONG_BINGET" or name == "GET":
        stack.append(memo[arg] if arg in memo else Node("other"))
    else:
        handler = _HANDLERS.get(name)
        if handler is None:
            _generic(pickletools.opcodes[_OPCODE_INDEX[name]], stack)
        else:
            handler(result, stack, memo, arg)


def _run(data, result, stack, memo):
    """Decode ``data``'s opcodes and :func:`step` through them.

    The opcodes dumps write most often are decoded here, with no object
    made per opcode; any other, and any opcode whose argument runs past the
    end, is read by :mod:`pickletools`' own argument readers (whose errors
    are the walk's errors), so both decode a stream identically.
    """
    push = stack.append
    end = len(data)
    no_arg = _NO_ARG
    pos = 0
    while True:
        if pos >= end:
            raise ValueError("pickle exhausted before seeing STOP")
        code = data[pos]
        if code == 0x94:  # MEMOIZE
            memo[len(memo)] = stack[-1] if stack and stack[-1] is not _MARK else Node("other")
            pos += 1
        elif code == 0x68 and pos + 1 < end:  # BINGET
            key = data[pos + 1]
            push(memo[key] if key in memo else Node("other"))
            pos += 2
        elif code == 0x8C and pos + 1 < end and pos + 2 + data[pos + 1] <= end:
            # SHORT_BINUNICODE
            start = pos + 2
            pos = start + data[pos + 1]
            push(data[start:pos].decode("utf-8", "surrogatepass"))
        elif code == 0x4B and pos + 1 < end:  # BININT1
            push(data[pos + 1])
            pos += 2
        elif code == 0x85 and stack:  # TUPLE1
            stack[-1] = (stack[-1],)
            pos += 1
        elif code == 0x28:  # MARK
            push(_MARK)
            pos += 1
        elif code == 0x7D:  # EMPTY_DICT
            push(Node("dict"))
            pos += 1
        elif code == 0x52 and len(stack) > 1:  # REDUCE, as _reduce
            args = stack.pop()
            stack[-1] = _call(stack[-1], args)
            pos += 1
        elif code == 0x73 and len(stack) > 2:  # SETITEM, as _setitem
            value = stack.pop()
            key = stack.pop()
            target = stack[-1]
            if type(target) is Node and (type(value) is Node or type(value) is tuple):
                target.children.append((_key_label(key), value))
            pos += 1
        elif no_arg[code] is not None:
            no_arg[code](result, stack, memo, None)
            pos += 1
            if code == 0x2E:  # STOP
                return
        elif code == 0x4A and pos + 5 <= end:  # BININT
            push(_INT4(data, pos + 1)[0])
            pos += 5
        elif code == 0x6A and pos + 5 <= end:  # LONG_BINGET
            key = _UINT4(data, pos + 1)[0]
            push(memo[key] if key in memo else Node("other"))
            pos += 5
        elif code == 0x4D and pos + 3 <= end:  # BININT2
            push(data[pos + 1] | data[pos + 2] << 8)
            pos += 3
        elif code == 0x58 and pos + 5 <= end and pos + 5 + _UINT4(data, pos + 1)[0] <= end:
            # BINUNICODE
            start = pos + 5
            pos = start + _UINT4(data, pos + 1)[0]
            push(data[start:pos].decode("utf-8", "surrogatepass"))
        elif code == 0x95 and pos + 9 <= end:  # FRAME: frames change no opcode
            pos += 9
        elif code == 0x71 and pos + 1 < end:  # BINPUT
            memo[data[pos + 1]] = _top(stack)
            pos += 2
        else:
            pos = _decoded_step(data, pos, result, stack, memo)
            if code == 0x2E:
                return


def _decoded_step(data, pos, result, stack, memo):
    """Read the opcode at ``pos`` with :mod:`pickletools` and step; its end."""
    code = data[pos:pos + 1]
    op = pickletools.code2op.get(code.decode("latin-1"))
    if op is None:
        raise ValueError(f"at position {pos}, opcode {code!r} unknown")
    if op.arg is None:
        arg, pos = None, pos + 1
    else:
        stream = io.BytesIO(data)
        stream.seek(pos + 1)
        arg = op.arg.reader(stream)
        pos = stream.tell()
    step(result, stack, memo, op.name, arg)
    return pos


_INT4 = struct.Struct("<i").unpack_from
_UINT4 = struct.Struct("<I").unpack_from
_OPCODE_INDEX = {op.name: i for i, op in enumerate(pickletools.opcodes)}


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


def _generic(op, stack):
    """Keep the stack's shape for an opcode not modelled: its results are "other"."""
    before = op.stack_before
    if pickletools.markobject in before:
        _pop_mark(stack)
        n = before.index(pickletools.markobject)
    else:
        n = len(before)
    if n:
        del stack[max(0, len(stack) - n):]
    stack.extend(Node("other") for _ in op.stack_after)


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


def _stop(result, stack, memo, arg):
    result.top = _pop(stack)


def _mark(result, stack, memo, arg):
    stack.append(_MARK)


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
            for label, child in part.children:
                key = label[2:-2] if label.startswith("['") and label.endswith("']") else None
                if key is not None and key.isidentifier():
                    obj.add(f".{key}", child)
                else:
                    obj.add(f".__dict__{label}", child)
        else:
            obj.add("<state>", part)


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
    elif target == _REBUILD_VIEW:
        # (base, cls, state): the subclass instance is its base array.
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


_HANDLERS = {
    "PROTO": _proto, "FRAME": _frame, "STOP": _stop, "MARK": _mark,
    "PUT": _put, "BINPUT": _put, "LONG_BINPUT": _put,
    "POP": _pop_one, "POP_MARK": _pop_to_mark, "DUP": _dup,
    "NEWTRUE": _bool(True), "NEWFALSE": _bool(False),
    **{name: _bytes for name in _BYTES},
    **{f"EMPTY_{kind.upper()}": _empty(kind) for kind in ("dict", "list", "set")},
    "EMPTY_TUPLE": _bool(()),
    "DICT": _dict, "LIST": _sequence("list"), "TUPLE": _sequence("tuple"),
    "FROZENSET": _sequence("set"),
    "TUPLE1": _tuple_n(1), "TUPLE2": _tuple_n(2), "TUPLE3": _tuple_n(3),
    "APPEND": _append, "APPENDS": _appends, "SETITEM": _setitem, "SETITEMS": _setitems,
    "ADDITEMS": _additems,
    "GLOBAL": _global, "STACK_GLOBAL": _stack_global, "INST": _inst, "OBJ": _obj,
    "REDUCE": _reduce, "NEWOBJ": _reduce, "NEWOBJ_EX": _newobj_ex, "BUILD": _build,
    "EXT1": _ext, "EXT2": _ext, "EXT4": _ext,
}

_HANDLERS["NONE"] = _bool(None)

#: Handlers of the opcodes that take no argument, by opcode byte (None for
#: the others, and for those modelled only by :func:`_generic`).
_NO_ARG = [None] * 256
for _op in pickletools.opcodes:
    if _op.arg is None and _op.name in _HANDLERS:
        _NO_ARG[ord(_op.code)] = _HANDLERS[_op.name]
