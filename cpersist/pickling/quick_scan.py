"""The exact scan of the restricted load's quick path (:mod:`.quick`): one
regular expression whose language is streams of binary opcodes that the C
unpickler builds as the restricted machine does (see :mod:`.quick` for what
it takes and why), matched in C with no step per opcode in Python, and
compiled once a process has asked for it often enough to pay for compiling
it (:func:`paid_scan`)."""

import pickle
import re

#: Streams a process asks the scan about before its pattern is compiled
#: (each goes to the machine meanwhile). Compiling it takes 45-55 ms; the
#: machine takes about 0.1 ms more than the quick path on a small stream:
#: by this many, the machine has cost a process about what compiling would
#: have, so no process pays much more than twice the least it could, and one
#: that makes a few restricted loads (``cpersist info``) compiles nothing.
SCANS_BEFORE_COMPILING = 500
_compiled = None
_asked = 0


def paid_scan(now, *args):
    """:func:`exact_scan` of ``args`` (a process passes the same ones
    every time), compiled once the process has asked for it
    :data:`SCANS_BEFORE_COMPILING` times, or ``now``; None before."""
    global _compiled, _asked
    if _compiled is None:
        if not now and _asked < SCANS_BEFORE_COMPILING:
            _asked += 1
            return None
        _compiled = exact_scan(*args)
    return _compiled


def exact_scan(same_hash, depth_cap, put_below, str_hash_predictable):
    """``fullmatch`` of the pattern of the streams the scan takes: fewer than
    ``same_hash`` keys of a chosen hash (strings and bytes among them when
    ``str_hash_predictable``), or no set or dict filled and at most
    ``depth_cap`` tuples; ``LONG_BINPUT`` indices below ``put_below``."""
    assert put_below == 1 << 13  # spelt below: a second byte under 0x20
    P, esc = pickle, re.escape
    # Opcodes without argument making no key of a chosen hash: MARK, POP,
    # POP_MARK, DUP, NONE, the empty list, dict and set, APPEND(S), LIST,
    # the booleans, MEMOIZE. Then those filling a set or a dict, and those
    # making a tuple.
    plain = (P.MARK + P.POP + P.POP_MARK + P.DUP + P.NONE + P.EMPTY_LIST + P.EMPTY_DICT
             + P.APPEND + P.APPENDS + P.LIST + P.NEWTRUE + P.NEWFALSE + P.EMPTY_SET + P.MEMOIZE)
    fills = P.SETITEM + P.SETITEMS + P.DICT + P.ADDITEMS
    tuples = P.EMPTY_TUPLE + P.TUPLE + P.TUPLE1 + P.TUPLE2 + P.TUPLE3
    # The alternatives of one step, each opening with a literal or a class,
    # the commonest in a dump first (sre tries them in turn, skipping one
    # whose first byte differs); a run of opcodes without argument is one
    # step. A string is mostly followed by MEMOIZE, taken with it. A
    # LONG_BINPUT index is below put_below: any low byte, a second byte
    # below 0x20.
    string = _sized(P.SHORT_BINUNICODE, 1) + esc(P.MEMOIZE) + b"?"
    ints = [esc(P.BININT1) + b".", esc(P.BININT2) + b".."]
    float_ = esc(P.BINFLOAT) + _skip(8)
    memo = [esc(P.BININT) + b"....", esc(P.BINGET) + b".", esc(P.BINPUT) + b".",
            esc(P.LONG_BINGET) + b"....", esc(P.LONG_BINPUT) + b".[\x00-\x1f]\x00\x00"]
    long_strings = _sized(P.BINUNICODE + P.BINBYTES, 4)
    stop_next = b"(?=" + esc(P.STOP) + b"\\Z)"
    # Each iteration of a possessive repeat (one pass, no backtracking): the
    # steps not counted, then one that is, or the STOP next (so that at most
    # same_hash iterations take fewer counted steps than that, or as many
    # when the last is the last opcode: fewer than the machine refuses).
    if str_hash_predictable:  # strings and bytes make keys of a chosen hash
        uncounted = [*ints, *memo]
        counted = [string, float_, _sized(P.SHORT_BINBYTES + P.LONG1, 1), long_strings]
    else:
        uncounted = [string, *ints, *memo, _sized(P.SHORT_BINBYTES, 1), long_strings]
        counted = [float_, _sized(P.LONG1, 1)]
    few_chosen = (b"(?:" + _one_of(*uncounted, b"[" + esc(plain + fills) + b"]++") + b"*+"
                  + _one_of(*counted, b"[" + esc(tuples + P.FROZENSET) + b"]", stop_next)
                  + b"){0,%d}+" % same_hash)
    floats = float_ + b"(?:" + float_ + b")*+"  # a run of them in one step
    no_fill = (b"(?:" + _one_of(string, floats, *ints, *memo, b"[" + esc(plain) + b"]++",
                                 _sized(P.SHORT_BINBYTES + P.LONG1, 1), long_strings)
               + b"*+" + _one_of(b"[" + esc(tuples) + b"]", stop_next) + b"){0,%d}+" % depth_cap)
    head = esc(P.PROTO) + b"[\x02-\x05](?:" + esc(P.FRAME) + b".{8})?"
    return re.compile(head + _one_of(few_chosen, no_fill) + esc(P.STOP), re.DOTALL).fullmatch


def _sized(opcodes, length_bytes):
    """The pattern of one of ``opcodes`` (a class of them: sre decides
    quicker on one literal) and its argument: a little-endian length of
    ``length_bytes`` bytes, below 256, then that many bytes. A regular
    expression cannot read a length, so each is spelt out, an alternative
    per value (sre skips one whose first byte differs without entering it;
    the cost is the pattern's compilation, once per process)."""
    zeros = b"\x00" * (length_bytes - 1)
    first = re.escape(opcodes) if len(opcodes) == 1 else b"[" + re.escape(opcodes) + b"]"
    return first + b"(?:" + b"|".join(
        re.escape(bytes([n])) + zeros + _skip(n) for n in range(256)) + b")"


def _skip(n):
    """The pattern of ``n`` bytes, any (a few ``.`` match quicker than a
    repeat)."""
    return b"." * n if n <= 8 else b".{%d}" % n


def _one_of(*alternatives):
    return b"(?:" + b"|".join(alternatives) + b")"
