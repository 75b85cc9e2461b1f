"""Each pickle opcode's argument, read the way the C unpickler reads it.

The walker of :mod:`cpersist.stream.opcodes` and the restricted load of
:mod:`cpersist.pickling.restricted` both read a stream's opcodes with :func:`read`,
so that what they see is what ``pickle.load`` (the C ``_pickle`` module)
would execute: ``I0x10\\n`` is an INT of 16, ``I010\\n`` one of 8 (C's
``strtol`` with base 0), a text line ends at its first NUL, a frame does
not bound the opcodes inside it. :mod:`pickletools` reads several of these
differently, and an opcode it rejects is one the C unpickler may run.
Anything the C unpickler would refuse raises :class:`StreamError`.
"""

import math
import re
import struct

#: Opcode byte -> its name, as :mod:`pickletools` names it (protocols 0 to 5).
NAMES = {
    0x28: "MARK", 0x2E: "STOP", 0x30: "POP", 0x31: "POP_MARK", 0x32: "DUP",
    0x46: "FLOAT", 0x49: "INT", 0x4A: "BININT", 0x4B: "BININT1", 0x4C: "LONG",
    0x4D: "BININT2", 0x4E: "NONE", 0x50: "PERSID", 0x51: "BINPERSID", 0x52: "REDUCE",
    0x53: "STRING", 0x54: "BINSTRING", 0x55: "SHORT_BINSTRING", 0x56: "UNICODE",
    0x58: "BINUNICODE", 0x61: "APPEND", 0x62: "BUILD", 0x63: "GLOBAL", 0x64: "DICT",
    0x7D: "EMPTY_DICT", 0x65: "APPENDS", 0x67: "GET", 0x68: "BINGET", 0x69: "INST",
    0x6A: "LONG_BINGET", 0x6C: "LIST", 0x5D: "EMPTY_LIST", 0x6F: "OBJ", 0x70: "PUT",
    0x71: "BINPUT", 0x72: "LONG_BINPUT", 0x73: "SETITEM", 0x74: "TUPLE",
    0x29: "EMPTY_TUPLE", 0x75: "SETITEMS", 0x47: "BINFLOAT",
    0x80: "PROTO", 0x81: "NEWOBJ", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4",
    0x85: "TUPLE1", 0x86: "TUPLE2", 0x87: "TUPLE3", 0x88: "NEWTRUE", 0x89: "NEWFALSE",
    0x8A: "LONG1", 0x8B: "LONG4",
    0x42: "BINBYTES", 0x43: "SHORT_BINBYTES",
    0x8C: "SHORT_BINUNICODE", 0x8D: "BINUNICODE8", 0x8E: "BINBYTES8", 0x8F: "EMPTY_SET",
    0x90: "ADDITEMS", 0x91: "FROZENSET", 0x92: "NEWOBJ_EX", 0x93: "STACK_GLOBAL",
    0x94: "MEMOIZE", 0x95: "FRAME", 0x96: "BYTEARRAY8", 0x97: "NEXT_BUFFER",
    0x98: "READONLY_BUFFER",
}

HIGHEST_PROTOCOL = 5

_I4 = struct.Struct("<i").unpack_from
_U2 = struct.Struct("<H").unpack_from
_U4 = struct.Struct("<I").unpack_from
_U8 = struct.Struct("<Q").unpack_from
_F8 = struct.Struct(">d").unpack_from
_SSIZE_MAX = 2 ** 63 - 1


#: Why a stream whose opcode runs past the end of its frame is refused. No
#: pickler writes one, and the C unpickler reads it one way from bytes and
#: another from a file (it drops the rest of a frame it cannot finish an
#: opcode from): the walker and the restricted load refuse it.
FRAME_CROSSED = "an opcode runs past the end of its frame"


class StreamError(ValueError):
    """The stream is one the C unpickler refuses (its words, and where)."""


def _truncated():
    return StreamError("pickle data was truncated")


def _line(data, pos):
    """The line at ``pos`` with its newline (none at the very end) and what follows."""
    end = data.find(b"\n", pos)
    if end < 0:
        if pos >= len(data):
            raise _truncated()
        return data[pos:], len(data)
    return data[pos:end + 1], end + 1


def _c_string(line):
    """What C's string functions see of ``line``: up to its first NUL."""
    nul = line.find(b"\0")
    return line if nul < 0 else line[:nul]


_SPACE = b" \t\n\v\f\r"
_HEX = b"0123456789abcdefABCDEF"


def _strtol(s):
    """``(value, end)`` as C ``strtol(s, &end, 0)``: value None on overflow,
    end 0 when no digits were read."""
    n = len(s)
    i = 0
    while i < n and s[i] in _SPACE:
        i += 1
    negative = i < n and s[i] == 0x2D
    if i < n and s[i] in b"+-":
        i += 1
    base = 10
    if i < n and s[i] == 0x30:
        if i + 2 < n and s[i + 1] in b"xX" and s[i + 2] in _HEX:
            base, i = 16, i + 2
        else:
            base = 8
    digits = _HEX if base == 16 else b"01234567" if base == 8 else b"0123456789"
    start = i
    while i < n and s[i] in digits:
        i += 1
    if i == start:
        return 0, 0
    value = int(s[start:i], base)
    value = -value if negative else value
    if not -2 ** 63 <= value < 2 ** 63:
        return None, i
    return value, i


def _pylong(s, base):
    """``PyLong_FromString(s, NULL, base)``, as the C unpickler calls it."""
    try:
        return int(_c_string(s), base)
    except ValueError as exc:
        if "digits" in str(exc):  # the interpreter's limit on decimal digits
            raise StreamError(f"an integer of too many digits: {exc}") from None
        raise StreamError("could not convert string to int") from None


def int_text(line):
    """INT's argument (an int, or a bool for ``00``/``01``)."""
    if len(line) < 2:
        raise _truncated()
    s = _c_string(line)
    value, end = _strtol(s)
    if value is None or s[end:] != b"\n":
        return _pylong(s, 0)
    if len(line) == 3 and value in (0, 1):
        return bool(value)
    return value


def long_text(line):
    """LONG's argument: an optional trailing ``L`` is dropped."""
    if len(line) < 2:
        raise _truncated()
    if line[-2:-1] == b"L":
        line = line[:-2]
    return _pylong(line, 0)


_FLOAT = re.compile(rb"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
                    rb"|[iI][nN][fF](?:[iI][nN][iI][tT][yY])?|[nN][aA][nN])")


def float_text(line):
    """FLOAT's argument, as ``PyOS_string_to_double`` reads it."""
    if len(line) < 2:
        raise _truncated()
    s = _c_string(line)
    match = _FLOAT.match(s)
    if match is None or s[match.end():match.end() + 1] not in (b"\n", b""):
        raise StreamError("could not convert string to float")
    text = match.group()
    value = float(text)
    if math.isinf(value) and b"n" not in text.lower():
        raise StreamError(f"float {text.decode()} out of range")
    return value


def _memo_index(line):
    if len(line) < 2:
        raise _truncated()
    value = _pylong(line, 10)
    if not -_SSIZE_MAX - 1 <= value <= _SSIZE_MAX:
        raise StreamError("memo index out of range")
    return value


def _decode(raw, encoding, errors="strict"):
    try:
        return str(raw, encoding, errors)
    except UnicodeDecodeError as exc:
        raise StreamError(f"undecodable string: {exc}") from None


def string_text(line):
    """STRING's argument: a quoted, escaped, ASCII string."""
    raw = line[:-1]
    if len(raw) < 2 or raw[0] != raw[-1] or raw[0] not in b"\"'":
        raise StreamError("the STRING opcode argument must be quoted")
    import codecs
    import warnings

    try:
        with warnings.catch_warnings():  # "invalid escape sequence": a file's, not the caller's
            warnings.simplefilter("ignore", DeprecationWarning)
            raw = codecs.escape_decode(raw[1:-1])[0]
    except ValueError as exc:
        raise StreamError(f"bad STRING escape: {exc}") from None
    return _decode(raw, "ascii")


def _sized(data, pos, size):
    end = pos + size
    if end > len(data):
        raise _truncated()
    return data[pos:end], end


def read(data, pos):
    """``(name, argument, next position)`` of the opcode at ``pos``.

    ``data`` is bytes. Raises :class:`StreamError` for an unknown opcode or
    an argument the C unpickler refuses; ``EXT*`` codes and ``PERSID``
    names are returned, not judged.
    """
    code = data[pos]
    name = NAMES.get(code)
    if name is None:
        raise StreamError(f"invalid load key, {bytes([code])!r} at position {pos}")
    pos += 1
    reader = _READERS.get(name)
    if reader is None:
        return name, None, pos
    arg, pos = reader(data, pos)
    return name, arg, pos


def read_in_frame(data, pos, frame_end):
    """:func:`read`, for an opcode at ``pos`` in a stream whose current frame
    ends at ``frame_end`` (0: none yet).

    The C unpickler reads an opcode as a few reads (the opcode byte, a size,
    the bytes it counts, a line); one that starts before the frame's end and
    ends after it is refused with :data:`FRAME_CROSSED`.
    """
    try:
        name, arg, end = read(data, pos)
    except StreamError:
        if pos < frame_end and _unreadable_in(data, pos, frame_end):
            raise StreamError(FRAME_CROSSED) from None
        raise
    if pos + 1 < frame_end < end and crosses(data, name, arg, pos, end, frame_end):
        raise StreamError(FRAME_CROSSED)
    if name == "FRAME" and end + arg > frame_end > end:
        raise StreamError(FRAME_CROSSED)  # a frame in a frame, ending after it
    return name, arg, end


def next_frame_end(frame_end, end, arg):
    """Where the frame ends after a FRAME read up to ``end``: a frame read
    from inside the current one (and within it) leaves it as it is."""
    return end + arg if end >= frame_end else frame_end


#: Width of the size read before the bytes it counts.
_SIZE_WIDTH = {"BINSTRING": 4, "SHORT_BINSTRING": 1, "BINUNICODE": 4, "SHORT_BINUNICODE": 1,
               "BINUNICODE8": 8, "BINBYTES": 4, "SHORT_BINBYTES": 1, "BINBYTES8": 8,
               "BYTEARRAY8": 8, "LONG1": 1, "LONG4": 4}


def crosses(data, name, arg, start, end, frame_end):
    """Whether one of the reads of the opcode at ``start`` (ending at
    ``end``) starts before ``frame_end`` and ends after it."""
    if not start + 1 < frame_end < end:
        return False
    if name in _SIZE_WIDTH:
        return frame_end != start + 1 + _SIZE_WIDTH[name]
    if name in ("GLOBAL", "INST"):
        return frame_end != data.index(b"\n", start + 1) + 1
    return True


_LINE_OPS = frozenset(("FLOAT", "INT", "LONG", "PERSID", "STRING", "UNICODE", "GLOBAL", "INST",
                       "GET", "PUT"))


def _unreadable_in(data, pos, frame_end):
    """Whether the opcode at ``pos`` needs bytes beyond ``frame_end``."""
    window = data[pos:frame_end]
    try:
        name, arg, end = read(window, 0)
    except StreamError:
        return True
    return name in _LINE_OPS and not window[:end].endswith(b"\n")


def recheck(data, start, stop, frame_end):
    """Raise :data:`FRAME_CROSSED` if an opcode from ``start`` to ``stop``
    (read whole by a faster path) has a read across ``frame_end``."""
    pos = start
    while pos < stop:
        name, arg, end = read(data, pos)
        if crosses(data, name, arg, pos, end, frame_end):
            raise StreamError(FRAME_CROSSED)
        pos = end


def _fixed(size, unpack):
    def reader(data, pos):
        if pos + size > len(data):
            raise _truncated()
        return unpack(data, pos)[0], pos + size
    return reader


def _byte(data, pos):
    if pos >= len(data):
        raise _truncated()
    return data[pos], pos + 1


def _text(parse):
    def reader(data, pos):
        line, pos = _line(data, pos)
        return parse(line), pos
    return reader


def _counted(size_reader, make, negative=None):
    def reader(data, pos):
        size, pos = size_reader(data, pos)
        if size < 0:
            raise StreamError(negative)
        raw, pos = _sized(data, pos, size)
        return make(raw), pos
    return reader


def _global_lines(data, pos):
    module, pos = _line(data, pos)
    name, pos = _line(data, pos)
    if len(name) < 2:
        raise _truncated()
    return f"{_decode(module[:-1], 'utf-8')} {_decode(name[:-1], 'utf-8')}", pos


def _proto(data, pos):
    value, pos = _byte(data, pos)
    if value > HIGHEST_PROTOCOL:
        raise StreamError(f"unsupported pickle protocol: {value}")
    return value, pos


def _frame(data, pos):
    size, pos = _fixed(8, _U8)(data, pos)
    if pos + size > len(data):
        raise _truncated()
    return size, pos  # the C unpickler reads on from the frame's start


def _long_bytes(raw):
    return int.from_bytes(raw, "little", signed=True)


def _persid(line):
    if len(line) < 1:
        raise _truncated()
    return _decode(line[:-1], "ascii")


_U4_READER = _fixed(4, _U4)
_U8_READER = _fixed(8, _U8)
_I4_READER = _fixed(4, _I4)

_READERS = {
    "FLOAT": _text(float_text), "INT": _text(int_text), "LONG": _text(long_text),
    "BININT": _I4_READER, "BININT1": _byte, "BININT2": _fixed(2, _U2),
    "PERSID": _text(_persid), "STRING": _text(string_text),
    "BINSTRING": _counted(_I4_READER, lambda raw: _decode(raw, "ascii"),
                          "BINSTRING pickle has negative byte count"),
    "SHORT_BINSTRING": _counted(_byte, lambda raw: _decode(raw, "ascii")),
    "UNICODE": _text(lambda line: _decode(line[:-1], "raw-unicode-escape")),
    "BINUNICODE": _counted(_U4_READER, lambda raw: _decode(raw, "utf-8", "surrogatepass")),
    "SHORT_BINUNICODE": _counted(_byte, lambda raw: _decode(raw, "utf-8", "surrogatepass")),
    "BINUNICODE8": _counted(_U8_READER, lambda raw: _decode(raw, "utf-8", "surrogatepass")),
    "BINBYTES": _counted(_U4_READER, bytes), "SHORT_BINBYTES": _counted(_byte, bytes),
    "BINBYTES8": _counted(_U8_READER, bytes), "BYTEARRAY8": _counted(_U8_READER, bytearray),
    "GLOBAL": _global_lines, "INST": _global_lines,
    "GET": _text(_memo_index), "PUT": _text(_memo_index),
    "BINGET": _byte, "LONG_BINGET": _U4_READER, "BINPUT": _byte, "LONG_BINPUT": _U4_READER,
    "BINFLOAT": _fixed(8, _F8), "PROTO": _proto,
    "EXT1": _byte, "EXT2": _fixed(2, _U2), "EXT4": _I4_READER,
    "LONG1": _counted(_byte, _long_bytes),
    "LONG4": _counted(_I4_READER, _long_bytes, "LONG pickle has negative byte count"),
    "FRAME": _frame,
}
