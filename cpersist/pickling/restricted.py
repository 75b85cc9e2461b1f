"""The restricted load: a pickle machine that builds data.

``trusted=False`` (or an allowlist) loads with this machine instead of the
C unpickler: one loop reads each opcode's argument with
:mod:`cpersist.stream.args` (as the C unpickler reads it) and runs the
opcode, on a :class:`~.machine.Machine` (the load's state and budget), by
its handler in :mod:`.restricted_ops` or, for the commonest opcodes of a
dump, in the loop itself, so that every step a stream asks for is decided
here:

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

from .._runtime.gc import collector_paused
from ..exceptions import CorruptFileError, CpersistError
from ..stream.args import CODES, FRAME, NAMES, READERS, StreamError, next_frame_end
from .checks import Refused
from .machine import NESTING, Machine
from .restricted_ops import HANDLERS, LITERALS

_STOP, _MARK, _MEMOIZE, _BINGET, _BINPUT, _TUPLE1, _TUPLE2, _REDUCE = (
    CODES[name] for name in ("STOP", "MARK", "MEMOIZE", "BINGET", "BINPUT", "TUPLE1", "TUPLE2",
                             "REDUCE"))
_BININT1, _BININT2, _SHORT_BINUNICODE = (
    CODES[name] for name in ("BININT1", "BININT2", "SHORT_BINUNICODE"))
#: Opcode bytes whose argument the loop pushes as it is.
_PUSHED = bytes(NAMES.get(code) in LITERALS for code in range(256))


def execute(m):
    """Run the stream of the :class:`~.machine.Machine` ``m``; its object.

    Each opcode's argument is read by :data:`~cpersist.stream.args.READERS`,
    but for the commonest of a dump (a one-byte argument, BININT2 and
    SHORT_BINUNICODE), read here where it lies whole in the data and crosses
    no frame's end: a call each would be most of a small load's time. Each
    opcode is then run once, here or by its handler.
    """
    data = m.data
    end = len(data)
    stack = m.stack
    push = stack.append
    marks = m.marks
    memo = m.memo
    readers = READERS
    handlers = HANDLERS
    pushed = _PUSHED
    short_unicode, binint1, binint2, binget, binput = (
        _SHORT_BINUNICODE, _BININT1, _BININT2, _BINGET, _BINPUT)
    pos = opcodes = frame_end = 0
    check_at = m.check_clock(0)
    while True:
        if pos >= end:
            raise StreamError("pickle data was truncated")
        opcodes += 1
        if opcodes >= check_at:
            check_at = m.check_clock(opcodes)
        code = data[pos]
        # -- the commonest literals, read here and pushed --
        if code == short_unicode:
            if pos + 2 <= end:
                stop = pos + 2 + data[pos + 1]
                if stop <= end and not pos + 2 < frame_end < stop:
                    try:
                        push(str(data[pos + 2:stop], "utf-8", "surrogatepass"))
                        pos = stop
                        continue
                    except UnicodeDecodeError:
                        pass  # read below, which says what is wrong
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
        # -- the argument of any other --
        if readers[code] is None:
            arg = None
            pos += 1
        elif (code == binget or code == binput) and pos + 1 < end:
            arg = data[pos + 1]
            pos += 2
        else:
            arg, pos = readers[code](data, pos, frame_end)
            if code == FRAME:
                frame_end = next_frame_end(frame_end, pos, arg)
        # -- the opcode: the commonest of a dump here (their only handler;
        # each asks Machine.need, the one underflow check, only when its
        # items are short: a call each would cost as much as the opcode) --
        if code == _MEMOIZE:
            if len(stack) <= (marks[-1] if marks else 0):
                m.need(1)
            key = len(memo)
            if key not in memo:
                m.made()
            memo[key] = stack[-1]
        elif code == _BINGET:
            try:
                value = memo[arg]
            except KeyError:
                raise StreamError(f"Memo value not found at index {arg}") from None
            kind = type(value)
            push(value if kind is not bytearray and kind is not tuple and kind is not memoryview
                 else m.again(value))
        elif code == _BINPUT:
            if len(stack) <= (marks[-1] if marks else 0):
                m.need(1)
            if arg not in memo:
                m.made()
            memo[arg] = stack[-1]
        elif code == _MARK:
            marks.append(len(stack))
        elif code == _REDUCE:
            if len(stack) <= (marks[-1] if marks else 0) + 1:
                m.need(2)
            args = stack.pop()
            if type(args) is not tuple:
                raise StreamError("argument list must be a tuple")
            stack[-1] = m.call(stack[-1], args)
        elif code == _TUPLE1 or code == _TUPLE2:
            n = 1 if code == _TUPLE1 else 2
            if len(stack) - n < (marks[-1] if marks else 0):
                m.need(n)
            m.made()
            items = tuple(stack[-n:])
            del stack[-n:]
            # Only a tuple holding a tuple or frozenset nests: flat ones,
            # most of some streams, skip the call.
            if type(items[0]) in NESTING or n == 2 and type(items[1]) in NESTING:
                m.nested(items)
            push(items)
        elif pushed[code]:
            push(arg)
        elif code == _STOP:
            return m.pop()
        else:
            handlers[code](m, arg)


def run(data, resolve, persistent_load, limits, source, on_protocol=None, dry=False, *,
        buffers=None):
    """Execute the pickle stream ``data`` under the checks; its object
    (see :class:`Machine` for the arguments).

    ``buffers`` are the file's out-of-band buffers (memoryviews, in stream
    order), which NEXT_BUFFER takes one after another (from protocol 5 on).
    An inline array views its buffer, when nothing else reaches it, rather
    than copying it: what arrays view costs no more than the file's blocks
    hold. A stream that takes more buffers than there are, or fewer, is
    damaged (the C unpickler leaves those it does not take unread: a
    stranger's file would carry data no load looks at).

    Raises
    ------
    UntrustedObjectError, LimitExceededError
    CorruptFileError
        For a malformed stream, a forged numpy description, or any call of
        the stream failing (the message names the cause).
    """
    machine = Machine(data, resolve, persistent_load, limits, source, dry, buffers)
    if on_protocol is not None:
        machine.on_protocol = on_protocol
    try:
        with collector_paused():  # a stream makes many objects and frees none
            made = execute(machine)
        unused = machine.unused_buffers()
        if unused:
            raise CorruptFileError(f"{source}: the file holds {unused} out-of-band "
                                   f"buffer{'s' if unused > 1 else ''} its pickle stream "
                                   f"does not take")
        return made
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
