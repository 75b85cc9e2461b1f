"""Walk a pickle stream's opcodes symbolically, importing and calling nothing.

:func:`walk` decodes a stream once and drives :mod:`cpersist.stream.symbolic`'s
stack machine through its opcodes. The opcodes dumps write most often are
decoded by hand, with no object made per opcode; any other is read by
:func:`cpersist.stream.args.read`, which reads each argument as the C
unpickler does, so that the walk sees the opcodes ``pickle.load`` would run.
Its cost is bounded by :class:`cpersist.Limits` (opcodes and nodes).
"""

import struct

from .._runtime.gc import collector_paused
from ..format.limits import DEFAULT, exceeded
from .args import FRAME_CROSSED, next_frame_end, read_in_frame, recheck
from .symbolic import (_MARK, _NO_ARG, _STORED_ARRAY, MAX_KEPT_BYTES, Node, ObjectsExceeded,
                       _call, _key_label, _top, step)

__all__ = ["Node", "Walk", "step", "walk"]

_INT4 = struct.Struct("<i").unpack_from
_UINT4 = struct.Struct("<I").unpack_from
_UINT8 = struct.Struct("<Q").unpack_from


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
        Why decoding stopped early, for a malformed stream (worded as the
        C unpickler words it); what precedes the problem is recorded.
    """

    __slots__ = ("protocol", "globals", "unresolved", "extension_codes", "top", "error")

    def __init__(self):
        self.protocol = 0
        self.globals = set()
        self.unresolved = 0
        self.extension_codes = []
        self.top = None
        self.error = None


def walk(data, limits=None, source=None):
    """Walk the pickle stream ``data`` (bytes-like) once.

    Never raises on a malformed stream (see :attr:`Walk.error`), only
    :class:`~cpersist.LimitExceededError` when ``limits`` (default
    :class:`~cpersist.Limits`) are exceeded.

    Returns
    -------
    Walk
    """
    result = Walk()
    stack = []
    memo = {}
    if type(data) is not bytes:
        data = bytes(data)
    limits = DEFAULT if limits is None else limits
    made, ceiling = Node.made, Node.ceiling
    Node.ceiling = made + limits.max_objects
    try:
        with collector_paused():
            _run(data, result, stack, memo, limits, source)
    except ObjectsExceeded:
        raise exceeded("max_objects", Node.made - made, limits, source,
                       "builds at least {} objects") from None
    except UnicodeDecodeError as exc:  # a string the quick path decoded itself
        result.error = f"undecodable string: {exc}"
    except ValueError as exc:  # a malformed stream (StreamError, ...)
        result.error = str(exc)
    except (IndexError, KeyError, TypeError, AttributeError) as exc:
        # An opcode the C unpickler would refuse (a symbolic step found an
        # impossible stack): recorded as a malformed stream.
        result.error = f"malformed pickle stream ({type(exc).__name__}: {exc})"
    finally:
        Node.made, Node.ceiling = made, ceiling
    if result.top is None and stack and type(stack[-1]) in (Node, tuple):
        result.top = stack[-1]  # a stream ending early: what was built so far
    return result


def _run(data, result, stack, memo, limits, source):
    """Decode ``data``'s opcodes and :func:`step` through them.

    The opcodes dumps write most often are decoded here, with no object
    made per opcode; any other, and any opcode whose argument runs past the
    end, is read by :func:`cpersist.stream.args.read` (whose errors are the
    walk's errors), so both decode a stream identically.
    """
    push = stack.append
    end = len(data)
    no_arg = _NO_ARG
    stored = _STORED_ARRAY
    pos = 0
    ops = 0
    first_node = Node.made
    start = frame_end = 0
    while True:
        if pos >= end:
            raise ValueError("pickle data was truncated")
        if start < frame_end < pos:
            recheck(data, start, pos, frame_end)  # read by hand across a frame's end
        start = pos
        ops += 1
        if not ops & 0x3FFF:
            _check_limits(ops, Node.made - first_node + len(memo), limits, source)
        code = data[pos]
        if code == 0x94:  # MEMOIZE
            memo[len(memo)] = stack[-1] if stack and stack[-1] is not _MARK else Node("other")
            pos += 1
        elif code == 0x68 and pos + 1 < end:  # BINGET
            key = data[pos + 1]
            value = memo[key] if key in memo else Node("other")
            pos += 2
            if type(value) is Node and value.value == stored and value.kind == "global":
                pos = _stored_array_call(data, pos, end, memo, push, value)
            else:
                push(value)
        elif code == 0x8C and pos + 1 < end and pos + 2 + data[pos + 1] <= end:
            # SHORT_BINUNICODE, and the MEMOIZE that mostly follows
            start = pos + 2
            pos = start + data[pos + 1]
            value = data[start:pos].decode("utf-8", "surrogatepass")
            push(value)
            if pos < end and data[pos] == 0x94:
                memo[len(memo)] = value
                pos += 1
        elif code == 0x4B and pos + 1 < end:  # BININT1
            push(data[pos + 1])
            pos += 2
        elif code == 0x4D and pos + 3 <= end:  # BININT2
            push(data[pos + 1] | data[pos + 2] << 8)
            pos += 3
        elif code == 0x85 and stack:  # TUPLE1
            stack[-1] = (stack[-1],)
            pos += 1
        elif code == 0x28:  # MARK
            push(_MARK)
            pos += 1
        elif code == 0x7D:  # EMPTY_DICT, and the MEMOIZE that mostly follows
            value = Node("dict")
            push(value)
            pos += 1
            if pos < end and data[pos] == 0x94:
                memo[len(memo)] = value
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
                if type(key) is str and len(key) <= MAX_KEPT_BYTES:
                    label = f"[{key!r}]"  # as _key_label
                else:
                    label = _key_label(key)
                target.children.append((label, value))
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
            value = memo[key] if key in memo else Node("other")
            pos += 5
            if type(value) is Node and value.value == stored and value.kind == "global":
                pos = _stored_array_call(data, pos, end, memo, push, value)
            else:
                push(value)
        elif code == 0x58 and pos + 5 <= end and pos + 5 + _UINT4(data, pos + 1)[0] <= end:
            # BINUNICODE
            start = pos + 5
            pos = start + _UINT4(data, pos + 1)[0]
            push(data[start:pos].decode("utf-8", "surrogatepass"))
        elif code == 0x95 and pos + 9 <= end and pos + 9 + _UINT8(data, pos + 1)[0] <= end:
            pos += 9  # FRAME: frames change no opcode, only where one may end
            if pos + _UINT8(data, pos - 8)[0] > frame_end > pos:
                raise ValueError(FRAME_CROSSED)
            frame_end = next_frame_end(frame_end, pos, _UINT8(data, pos - 8)[0])
        elif code == 0x71 and pos + 1 < end:  # BINPUT
            memo[data[pos + 1]] = _top(stack)
            pos += 2
        else:
            pos = _decoded_step(data, pos, result, stack, memo, frame_end)
            if code == 0x95:
                frame_end = next_frame_end(frame_end, pos, _UINT8(data, pos - 8)[0])
            if code == 0x2E:
                return


def _stored_array_call(data, pos, end, memo, push, func):
    """Push ``func``, the ``stored_array`` global just fetched from the memo,
    and step through the call a dump writes after it, all at once.

    A dump calls it as ``BININT1``/``BININT2`` n, ``TUPLE1``, ``REDUCE``
    (protocol 4 and later memoize the tuple and the result): when exactly
    those bytes follow, the stack and memo end as the opcodes one by one
    would leave them, with an array node pushed. Otherwise only ``func`` is
    pushed, and the walk goes on from ``pos``. Returns where it goes on.
    """
    if pos + 3 < end:
        code = data[pos]
        if code == 0x4B:  # BININT1
            section = data[pos + 1]
            tuple1 = pos + 2
        elif code == 0x4D:  # BININT2
            section = data[pos + 1] | data[pos + 2] << 8
            tuple1 = pos + 3
        else:
            tuple1 = end
        if tuple1 + 1 < end and data[tuple1] == 0x85:
            reduce = tuple1 + 1
            memoize_args = data[reduce] == 0x94
            reduce += memoize_args
            if reduce < end and data[reduce] == 0x52:
                if memoize_args:
                    memo[len(memo)] = (section,)
                node = Node("array", section)
                push(node)
                pos = reduce + 1
                if pos < end and data[pos] == 0x94:
                    memo[len(memo)] = node
                    pos += 1
                return pos
    push(func)
    return pos


def _check_limits(ops, objects, limits, source):
    if ops > limits.max_opcodes:
        raise exceeded("max_opcodes", ops, limits, source, "runs at least {} opcodes")
    if objects > limits.max_objects:
        raise exceeded("max_objects", objects, limits, source, "builds at least {} objects")


def _decoded_step(data, pos, result, stack, memo, frame_end):
    """Read the opcode at ``pos`` as the C unpickler does and step; its end."""
    name, arg, pos = read_in_frame(data, pos, frame_end)
    step(result, stack, memo, name, arg)
    return pos
