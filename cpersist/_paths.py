"""Where each stored array sits in the pickled object, read from the opcodes.

The pickle stream of a cpersist file is never executed here: its opcodes are
walked with :func:`pickletools.genops` and a symbolic stack records which
dict key, list index or attribute holds each ``stored_array(n)`` call. The
result is best effort: arrays reached only through something it does not
model (an extension code, a persistent id, a custom ``__setstate__`` taking
a non-dict state) get no path.
"""

import pickletools
from collections import deque

_MODULE = "cpersist.pickler"
#: Opcodes walked at most: the walk is pure Python (~1 µs per opcode).
MAX_OPCODES = 5_000_000
_MARK = object()


class _Node:
    """A value on the symbolic stack: a container, a call, or a constant."""

    __slots__ = ("kind", "value", "children", "count", "items", "state")

    def __init__(self, kind, value=None):
        self.kind = kind          # const, global, dict, list, tuple, set, call, array, other
        self.value = value        # const: the value; global: (module, name); call: func;
        #                           array: section number; inline: its description
        self.children = []        # (label, node) for children that may hold arrays
        self.count = 0            # list: items appended so far
        self.items = ()           # tuple: all its members
        self.state = None         # call: what BUILD gave it

    def add(self, label, node):
        if node.kind != "const":
            self.children.append((label, node))


_CONST = _Node("const")


def _const(value):
    if isinstance(value, (str, bytes)) and len(value) > 200:
        return _CONST  # a long string is never a dict key worth showing
    return _Node("const", value)


def _key_label(key):
    if key.kind == "const" and isinstance(key.value, (str, int, float, bytes, bool)):
        return f"[{key.value!r}]"
    return "[?]"


def scan_arrays(pickled, root="obj"):
    """Find where the arrays of a cpersist pickle stream sit in the object.

    Parameters
    ----------
    pickled : bytes-like
        A cpersist pickle stream (the file's root section).
    root : str
        How the paths name the object itself.

    Returns
    -------
    dict
        ``"paths"``: ``{section: path}`` for the arrays stored in sections,
        e.g. ``{0: "obj['weights']", 1: "obj.coef_"}`` (sections not found
        are missing); ``"inline"``: one dict per small array kept inside the
        stream, with ``path``, ``dtype`` (``dtype.str``, or ``"?"``),
        ``shape``, ``order`` and ``raw_bytes`` (None if unknown). Never
        raises on a strange stream: what was understood up to the problem
        is returned.
    """
    stack = []
    memo = {}
    top = None
    try:
        for n, (op, arg, _) in enumerate(pickletools.genops(bytes(pickled))):
            if n >= MAX_OPCODES:
                break
            top = _step(op, arg, stack, memo)
            if op.name == "STOP":
                break
    except Exception:
        pass
    if top is None and stack:
        top = stack[-1] if stack[-1] is not _MARK else None
    if not isinstance(top, _Node):
        return {"paths": {}, "inline": []}
    return _assign(top, root)


def array_paths(pickled, root="obj"):
    """``{section: path}`` of the arrays stored in sections (see :func:`scan_arrays`)."""
    return scan_arrays(pickled, root)["paths"]


def _inline_description(args):
    """dtype, shape and order of an ``inline_array(data, dtype, shape, order)`` call."""
    desc = {"dtype": "?", "shape": None, "order": "?", "raw_bytes": None}
    items = args.items if args.kind == "tuple" else ()
    if len(items) != 4:
        return desc
    _, dtype, shape, order = items
    if order.kind == "const" and order.value in ("C", "F"):
        desc["order"] = order.value
    if shape.kind == "tuple" and all(
        i.kind == "const" and type(i.value) is int for i in shape.items
    ):
        desc["shape"] = [i.value for i in shape.items]
    dt = _dtype_of(dtype)
    if dt is not None:
        desc["dtype"] = dt.str if dt.fields is None else str(dt.descr)
        if desc["shape"] is not None:
            n = dt.itemsize
            for dim in desc["shape"]:
                n *= dim
            desc["raw_bytes"] = n
    return desc


def _dtype_of(node):
    """The numpy dtype a ``numpy.dtype(...)`` call node builds, or None.

    Only simple dtypes (no fields, no datetime unit) are rebuilt; numpy is
    imported lazily and nothing from the stream is called.
    """
    try:
        if node.kind != "call" or node.value.kind != "global" or node.value.value[0] not in (
            "numpy", "numpy.core.multiarray", "numpy._core.multiarray"
        ) or node.value.value[1] != "dtype":
            return None
        typestr = node.items[0].value if node.items and node.items[0].kind == "const" else None
        state = node.state.items if node.state is not None and node.state.kind == "tuple" else ()
        byteorder = state[1].value if len(state) > 1 and state[1].kind == "const" else "="
        fields = state[3].value if len(state) > 3 and state[3].kind == "const" else "?"
        if fields is not None or not isinstance(typestr, str) or typestr[:1] in ("M", "m", "V"):
            return None
        import numpy as np

        dt = np.dtype(typestr)
        return dt.newbyteorder(byteorder) if byteorder in ("<", ">") else dt
    except Exception:
        return None


def _pop_mark(stack):
    items = []
    while stack:
        item = stack.pop()
        if item is _MARK:
            break
        items.append(item)
    items.reverse()
    return items


def _step(op, arg, stack, memo):
    name = op.name
    if name in ("PROTO", "FRAME"):
        return None
    if name == "STOP":
        return stack.pop() if stack else None
    if name == "MARK":
        stack.append(_MARK)
    elif name == "MEMOIZE":
        memo[len(memo)] = stack[-1]
    elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
        memo[arg] = stack[-1]
    elif name in ("GET", "BINGET", "LONG_BINGET"):
        stack.append(memo.get(arg, _Node("other")))
    elif name == "POP":
        stack.pop()
    elif name == "POP_MARK":
        _pop_mark(stack)
    elif name == "DUP":
        stack.append(stack[-1])
    elif name in ("EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "EMPTY_SET"):
        stack.append(_Node(name[6:].lower()))
    elif name == "DICT":
        node = _Node("dict")
        items = _pop_mark(stack)
        for key, value in zip(items[0::2], items[1::2]):
            node.add(_key_label(key), value)
        stack.append(node)
    elif name in ("LIST", "TUPLE", "FROZENSET"):
        node = _Node({"LIST": "list", "TUPLE": "tuple", "FROZENSET": "set"}[name])
        items = _pop_mark(stack)
        for i, item in enumerate(items):
            node.add(f"[{i}]", item)
        node.count = len(items)
        if name == "TUPLE":
            node.items = items
        stack.append(node)
    elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
        size = int(name[-1])
        items = stack[-size:]
        del stack[-size:]
        node = _Node("tuple")
        node.items = items
        for i, item in enumerate(items):
            node.add(f"[{i}]", item)
        stack.append(node)
    elif name == "APPEND":
        value = stack.pop()
        _append(stack[-1], [value])
    elif name == "APPENDS":
        values = _pop_mark(stack)
        _append(stack[-1], values)
    elif name == "SETITEM":
        value = stack.pop()
        key = stack.pop()
        stack[-1].add(_key_label(key), value)
    elif name == "SETITEMS":
        items = _pop_mark(stack)
        for key, value in zip(items[0::2], items[1::2]):
            stack[-1].add(_key_label(key), value)
    elif name == "GLOBAL":
        module, _, attr = arg.partition(" ")
        stack.append(_Node("global", (module, attr)))
    elif name == "STACK_GLOBAL":
        attr = stack.pop()
        module = stack.pop()
        stack.append(_Node("global", (module.value, attr.value)))
    elif name == "REDUCE":
        args = stack.pop()
        func = stack.pop()
        stack.append(_call(func, args))
    elif name == "NEWOBJ":
        args = stack.pop()
        cls = stack.pop()
        stack.append(_call(cls, args))
    elif name == "NEWOBJ_EX":
        stack.pop()  # kwargs
        args = stack.pop()
        cls = stack.pop()
        stack.append(_call(cls, args))
    elif name == "OBJ":
        items = _pop_mark(stack)
        node = _Node("call", items[0] if items else None)
        for i, item in enumerate(items[1:]):
            node.add(f"<arg{i}>", item)
        stack.append(node)
    elif name == "BUILD":
        state = stack.pop()
        stack[-1].state = state
        _build(stack[-1], state)
    elif not op.stack_before and len(op.stack_after) == 1:
        stack.append(_const(arg))  # ints, strings, bytes, None, True, ...
    else:
        _generic(op, stack)
    return None


def _append(node, values):
    for value in values:
        node.add(f"[{node.count}]", value)
        node.count += 1


def _call(func, args):
    if func.kind == "global" and func.value == (_MODULE, "stored_array"):
        section = args.items[0].value if args.kind == "tuple" and args.items else None
        if type(section) is int:
            return _Node("array", section)
    if func.kind == "global" and func.value == (_MODULE, "inline_array"):
        return _Node("inline", _inline_description(args))
    node = _Node("call", func)
    node.items = args.items if args.kind == "tuple" else ()  # a dtype's are read back
    if func.kind == "global" and func.value == (_MODULE, "rebuild_view"):
        # (base, cls, state): the subclass instance is its base array.
        for label, child in args.children:
            node.add("" if label == "[0]" else f"<arg{label[1:-1]}>", child)
    elif func.kind == "global" and func.value == (_MODULE, "rebuild_masked"):
        # (cls, data, mask, fill_value, hard_mask)
        for label, child in args.children:
            node.add({"[1]": "", "[2]": ".mask"}.get(label, f"<arg{label[1:-1]}>"), child)
    elif args.kind == "tuple":
        for label, child in args.children:
            node.add(f"<arg{label[1:-1]}>", child)
    else:
        node.add("<args>", args)
    return node


def _build(obj, state):
    """``obj.__setstate__(state)``: a dict state (or (dict, slots)) sets attributes."""
    parts = [state]
    if state.kind == "tuple" and len(state.children) <= 2:
        parts = [child for _, child in state.children]
    for part in parts:
        if part.kind == "dict":
            for label, child in part.children:
                key = label[2:-2] if label.startswith("['") and label.endswith("']") else None
                if key is not None and key.isidentifier():
                    obj.add(f".{key}", child)
                else:
                    obj.add(f".__dict__{label}", child)
        else:
            obj.add("<state>", part)


def _generic(op, stack):
    """Keep the stack's shape for an opcode not modelled above."""
    before = op.stack_before
    if pickletools.markobject in before:
        _pop_mark(stack)
        below = before.index(pickletools.markobject)
    else:
        below = len(before)
    for _ in range(below):
        stack.pop()
    for _ in op.stack_after:
        stack.append(_Node("other"))


def _assign(top, root):
    """Breadth-first walk: each array gets the shortest path that reaches it."""
    paths = {}
    inline = []
    seen = {id(top)}
    queue = deque([(top, root)])
    while queue:
        node, path = queue.popleft()
        if node.kind == "array":
            paths.setdefault(node.value, path)
            continue
        if node.kind == "inline":
            inline.append({"path": path, **node.value})
            continue
        for label, child in node.children:
            if id(child) not in seen:
                seen.add(id(child))
                queue.append((child, path + label))
    return {"paths": paths, "inline": inline}
