"""How the C unpickler reads the text and string arguments of pickle
opcodes (``INT``, ``LONG``, ``FLOAT``, ``STRING``, memo indices and
encoded strings): :mod:`cpersist.stream.args` reads every opcode's argument
with these, so that what it returns is what ``pickle.load`` would see.
"""

import math
import re

_SSIZE_MAX = 2 ** 63 - 1


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
