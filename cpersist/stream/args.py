"""The pickle opcodes and the one reader of their arguments.

:data:`NAMES` names each opcode byte; :data:`READERS` reads each one's
argument, as the C unpickler reads it; :func:`argument` reads the argument
of one opcode of a framed stream. The walker of :mod:`cpersist.stream.opcodes`
and the restricted load of :mod:`cpersist.pickling.restricted` both loop over
a stream with these and dispatch on the opcode byte through tables
:func:`by_code` builds, so that what they see is what ``pickle.load`` (the C ``_pickle`` module)
would execute: ``I0x10\\n`` is an INT of 16, ``I010\\n`` one of 8 (C's
``strtol`` with base 0), a text line ends at its first NUL, a frame does
not bound the opcodes inside it. :mod:`pickletools` reads several of these
differently, and an opcode it rejects is one the C unpickler may run.
Anything the C unpickler would refuse raises :class:`StreamError`.
"""

import struct

from .text_args import (StreamError, _decode, _line, _memo_index, _truncated, float_text,
                        int_text, long_text, string_text)

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
_U4 = struct.Struct("<I").unpack_from
_U8 = struct.Struct("<Q").unpack_from
_U2 = struct.Struct("<H").unpack_from
_F8 = struct.Struct(">d").unpack_from


#: Why a stream whose opcode runs past the end of its frame is refused. No
#: pickler writes one, and the C unpickler reads it one way from bytes and
#: another from a file (it drops the rest of a frame it cannot finish an
#: opcode from): the walker and the restricted load refuse it.
FRAME_CROSSED = "an opcode runs past the end of its frame"


def _sized(data, pos, size):
    end = pos + size
    if end > len(data):
        raise _truncated()
    return data[pos:end], end


def read(data, pos):
    """``(name, argument, next position)`` of the opcode at ``pos``, frames
    not looked at (:data:`READERS` reads in a frame).

    ``data`` is bytes. Raises :class:`StreamError` for an unknown opcode or
    an argument the C unpickler refuses; ``EXT*`` codes and ``PERSID``
    names are returned, not judged.
    """
    code = data[pos]
    name = NAMES.get(code)
    if name is None:
        _unknown(data, pos + 1)
    reader = _READERS.get(name)
    if reader is None:
        return name, None, pos + 1
    arg, pos = reader(data, pos + 1)
    return name, arg, pos


def read_in_frame(data, pos, frame_end):
    """``(name, argument, next position)`` of the opcode at ``pos`` in a
    stream whose current frame ends at ``frame_end`` (see :data:`READERS`),
    for a reader that goes by the opcodes' names."""
    code = data[pos]
    if READERS[code] is None:
        return NAMES[code], None, pos + 1
    arg, end = READERS[code](data, pos, frame_end)
    return NAMES[code], arg, end


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


def _unknown(data, pos):  # a byte that is no opcode
    raise StreamError(f"invalid load key, {data[pos - 1:pos]!r} at position {pos - 1}")


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


def _copied(size_reader, make):
    """The reader of BINBYTES's argument and its like: ``make`` (``bytes``
    or ``bytearray``) of a view of ``data``, a bytes or a bytearray, so the
    argument is copied once (``make`` of a slice would copy it twice)."""
    def reader(data, pos):
        size, pos = size_reader(data, pos)
        raw, pos = _sized(memoryview(data), pos, size)
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
    "BINBYTES": _copied(_U4_READER, bytes), "SHORT_BINBYTES": _copied(_byte, bytes),
    "BINBYTES8": _copied(_U8_READER, bytes), "BYTEARRAY8": _copied(_U8_READER, bytearray),
    "GLOBAL": _global_lines, "INST": _global_lines,
    "GET": _text(_memo_index), "PUT": _text(_memo_index),
    "BINGET": _byte, "LONG_BINGET": _U4_READER, "BINPUT": _byte, "LONG_BINPUT": _U4_READER,
    "BINFLOAT": _fixed(8, _F8), "PROTO": _proto,
    "EXT1": _byte, "EXT2": _fixed(2, _U2), "EXT4": _I4_READER,
    "LONG1": _counted(_byte, _long_bytes),
    "LONG4": _counted(_I4_READER, _long_bytes, "LONG pickle has negative byte count"),
    "FRAME": _frame,
}

def _in_frame(code, reader):
    """The :data:`READERS` entry of an opcode whose argument ``reader``
    reads: the argument, read under the frame rules."""
    def read(data, pos, frame_end):
        try:
            arg, end = reader(data, pos + 1)
        except StreamError:
            if pos < frame_end and _unreadable_in(data, pos, frame_end):
                raise StreamError(FRAME_CROSSED) from None
            raise
        if pos + 1 < frame_end < end and crosses(data, NAMES[code], arg, pos, end, frame_end):
            raise StreamError(FRAME_CROSSED)
        if code == FRAME and end + arg > frame_end > end:
            raise StreamError(FRAME_CROSSED)  # a frame in a frame, ending after it
        return arg, end
    return read


#: Opcode byte -> ``read(data, position of the opcode, end of its frame (0:
#: none yet)) -> (argument, next position)``, the argument as the C
#: unpickler reads it; None for an opcode without one. The C unpickler reads
#: an opcode as a few reads (the opcode byte, a size, the bytes it counts, a
#: line): one that starts before the frame's end and ends after it is
#: refused with :data:`FRAME_CROSSED`. A byte that is no opcode is refused.
READERS = [None] * 256
CODES = {name: code for code, name in NAMES.items()}
FRAME = CODES["FRAME"]
for _code in range(256):
    if _code not in NAMES:
        READERS[_code] = _in_frame(_code, _unknown)
    elif NAMES[_code] in _READERS:
        READERS[_code] = _in_frame(_code, _READERS[NAMES[_code]])


def by_code(handlers):
    """``handlers`` (by opcode name) as a list indexed by opcode byte, None
    where it has none: the dispatch table of a loop over a stream."""
    table = [None] * 256
    for code, name in NAMES.items():
        table[code] = handlers.get(name)
    return table
