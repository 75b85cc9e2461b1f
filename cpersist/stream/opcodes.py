"""Walk a pickle stream's opcodes symbolically, importing and calling nothing.

:func:`walk` decodes a stream once, in one loop: each opcode's argument is
read by :data:`cpersist.stream.args.READERS`, as the C unpickler reads it,
so that the walk sees the opcodes ``pickle.load`` would run, and the opcode
is run on :mod:`cpersist.stream.symbolic`'s stack machine. Its cost is
bounded by :class:`cpersist.Limits` (opcodes and nodes).
"""

from .._runtime.gc import collector_paused
from ..format.limits import DEFAULT, exceeded
from .args import CODES, FRAME, NAMES, READERS, next_frame_end
from .symbolic import _MARK, HANDLERS, LITERALS, Node, ObjectsExceeded, _pop

__all__ = ["Node", "Walk", "walk"]

_STOP, _MARK_CODE, _MEMOIZE, _GET, _BINGET, _LONG_BINGET, _TUPLE1 = (
    CODES[name] for name in ("STOP", "MARK", "MEMOIZE", "GET", "BINGET", "LONG_BINGET",
                             "TUPLE1"))
_BININT1, _BININT2, _SHORT_BINUNICODE = (
    CODES[name] for name in ("BININT1", "BININT2", "SHORT_BINUNICODE"))
#: Opcodes walked between two checks of the limits.
_CHECK_EVERY = 1 << 14
#: Opcode bytes whose argument the loop pushes as it is.
_PUSHED = bytes(NAMES.get(code) in LITERALS for code in range(256))


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
    buffers : int
        ``NEXT_BUFFER`` opcodes: the out-of-band buffers the stream takes.
    top : Node or None
        The object the stream builds, as a tree.
    error : str or None
        Why decoding stopped early, for a malformed stream (worded as the
        C unpickler words it); what precedes the problem is recorded.
    """

    __slots__ = ("protocol", "globals", "unresolved", "extension_codes", "buffers", "top",
                 "error")

    def __init__(self):
        self.protocol = 0
        self.globals = set()
        self.unresolved = 0
        self.extension_codes = []
        self.buffers = 0
        self.top = None
        self.error = None


def walk(data, limits=None, source=None, quick_reads=True):
    """Walk the pickle stream ``data`` (bytes-like) once.

    Never raises on a malformed stream (see :attr:`Walk.error`), only
    :class:`~cpersist.LimitExceededError` when ``limits`` (default
    :class:`~cpersist.Limits`) are exceeded. ``quick_reads=False`` reads
    every argument by :data:`~cpersist.stream.args.READERS`, none in the
    loop: the walk the quick reads must match.

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
            _run(data, result, stack, memo, limits, source, quick_reads)
    except ObjectsExceeded:
        raise exceeded("max_objects", Node.made - made, limits, source,
                       "builds at least {} objects") from None
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


def _run(data, result, stack, memo, limits, source, quick_reads):
    """Decode ``data``'s opcodes and run each on the symbolic stack machine.

    The arguments of the commonest opcodes of a dump (BININT1, BININT2,
    SHORT_BINUNICODE, BINGET) are read here, where they lie whole in the
    data and cross no frame's end, with no call per opcode; any other, and
    any one that does not, by :data:`cpersist.stream.args.READERS` (whose
    errors are the walk's errors). Each opcode is then run once, here or by
    its handler.
    """
    push = stack.append
    end = len(data)
    readers = READERS
    handlers = HANDLERS
    pushed = _PUSHED
    short_unicode, binint1, binint2, binget = (
        (_SHORT_BINUNICODE, _BININT1, _BININT2, _BINGET) if quick_reads else (-1, -1, -1, -1))
    pos = ops = frame_end = 0
    check_at = _CHECK_EVERY
    first_node = Node.made
    while True:
        if pos >= end:
            raise ValueError("pickle data was truncated")
        ops += 1
        if ops >= check_at:
            _check_limits(ops, Node.made - first_node + len(memo), limits, source)
            check_at += _CHECK_EVERY
        code = data[pos]
        # -- the commonest literals, read here and pushed --
        if code == short_unicode:
            if pos + 2 <= end:
                stop = pos + 2 + data[pos + 1]
                if stop <= end and not pos + 2 < frame_end < stop:
                    try:
                        push(str(data[pos + 2:stop], "utf-8", "surrogatepass"))
                    except UnicodeDecodeError:
                        pass  # read below, which says what is wrong
                    else:
                        pos = stop
                        if pos >= end or data[pos] != _MEMOIZE:
                            continue
                        # The MEMOIZE that mostly follows a string: run below
                        # in this turn (a turn per opcode would cost a tenth
                        # of a walk).
                        ops += 1
                        code = _MEMOIZE
        elif code == binint1:
            if pos + 1 < end:  # one byte: no frame's end inside it
                push(data[pos + 1])
                pos += 2
                continue
        elif code == binint2:
            if pos + 3 <= end and frame_end != pos + 2:
                push(data[pos + 1] | data[pos + 2] << 8)
                pos += 3
                continue
        if code == _MEMOIZE:  # the commonest opcode of all, its only handler
            memo[len(memo)] = stack[-1] if stack and stack[-1] is not _MARK else Node("other")
            pos += 1
            continue
        # -- the argument of any other --
        if readers[code] is None:
            arg = None
            pos += 1
        elif code == binget and pos + 1 < end:
            arg = data[pos + 1]
            pos += 2
        else:
            arg, pos = readers[code](data, pos, frame_end)
            if code == FRAME:
                frame_end = next_frame_end(frame_end, pos, arg)
        # -- the opcode: the commonest here (their only handler) --
        if code == _BINGET or code == _LONG_BINGET or code == _GET:
            push(memo[arg] if arg in memo else Node("other"))
        elif code == _MARK_CODE:
            push(_MARK)
        elif code == _TUPLE1:  # a tuple is kept as a Python tuple of what it holds
            if stack:
                stack[-1] = (stack[-1],)
            else:
                push((Node("other"),))
        elif pushed[code]:
            push(arg)
        elif code == _STOP:
            result.top = _pop(stack)
            return
        else:
            handlers[code](result, stack, memo, arg)


def _check_limits(ops, objects, limits, source):
    if ops > limits.max_opcodes:
        raise exceeded("max_opcodes", ops, limits, source, "runs at least {} opcodes")
    if objects > limits.max_objects:
        raise exceeded("max_objects", objects, limits, source, "builds at least {} objects")
