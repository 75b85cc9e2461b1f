"""The restricted load's quick path: a small pickle stream that can name no
global, unpickled by the C unpickler when a few checks of its bytes prove
that the restricted machine (:mod:`.restricted`) would build the same object.

The machine decides on every opcode in Python, which costs a small object's
load many times what ``pickle.loads`` does. Most small streams hold nothing
it would refuse or build differently: plain containers, numbers and strings.
For those, :func:`quick_load` hands the stream to the C unpickler, under
these conditions (each a scan of the stream's bytes in C, none a walk of its
opcodes; an opcode's byte seen inside an argument counts as the opcode, so
every test errs towards the machine):

* **Nothing can be called.** A call needs a callable on the stack, and only
  a global (``GLOBAL``, ``INST``, ``STACK_GLOBAL``, ``EXT*``) or a
  persistent id puts one there. A stream holding an ``EXT*`` byte is left
  to the machine (the C unpickler serves a registered extension code from a
  process-wide cache, without asking ``find_class``). A stream holding a
  newline (which ``GLOBAL``, ``INST`` and ``PERSID`` need to end their
  argument) or a ``STACK_GLOBAL`` byte is unpickled by :class:`_Refusing`,
  whose ``find_class`` and ``persistent_load`` raise; any other by
  ``pickle.loads``, which then cannot reach one.
* **Nothing costs more than the machine allows.** The stream is at most
  :data:`QUICK_UP_TO` bytes and the load's :class:`~cpersist.Limits` are at
  least what that many opcodes could use (opcodes, objects, bytes: each
  opcode makes at most one object and fills at most one slot). ``LONG_BINPUT``
  and ``PUT`` make the C unpickler zero a memo of twice their index (a
  4-byte ``LONG_BINPUT`` index asks for 64 GiB): a stream holding an ``r``
  byte goes to the exact scan below, one holding a ``p`` byte and a newline
  to the machine. Integers the
  machine would refuse for their digits need ``LONG4``, a text line, or
  ``LONG1`` under a small ``max_digits``; those bytes send a longer stream to
  the machine.
* **Nothing the machine refuses is accepted.** Tuples and frozensets nest no
  deeper than there are bytes of the opcodes that make them, which must stay
  within ``max_depth`` (the C unpickler hashes a set's or a dict's key
  recursively). The machine refuses more than 16 keys of one set or dict
  with one hash (a collision flood), counting the keys whose hash a stream
  can choose: floats, large integers, tuples, frozensets (and strings and
  bytes when the process's hash seed is fixed, see
  :data:`.limits.STR_HASH_PREDICTABLE`); a stream with more than 16 bytes of
  the opcodes that make those and any byte of an opcode that fills a set or
  dict is left to it. ``BYTEARRAY8`` makes the one object the C unpickler
  lets a stream change where the machine refuses (``SETITEM``, ``APPEND``,
  ``READONLY_BUFFER`` of a bytearray): a stream holding its byte is left to
  the machine. A frame must span the whole stream (the machine refuses an
  opcode across a frame's end, which the C unpickler reads on). The C
  unpickler is given no out-of-band buffers: a ``NEXT_BUFFER`` fails there,
  and its stream goes to the machine.

A stream holding an ``r`` byte, or one these byte checks would leave to the
machine for a byte that may lie in an argument (an ``EXT*`` byte in a float;
more bytes of tuple or chosen-hash opcodes than there are such opcodes),
gets an exact look instead: one regular expression (:func:`_exact_scan`),
matched in C with no step per opcode in Python. Its language is the streams
of binary opcodes of protocols 2 to 5 (PROTO and a FRAME first, STOP last)
that name no global, call nothing, make no bytearray, hold no
``LONG_BINPUT`` index from :data:`PUT_BELOW` on (the memo stays within
:data:`_MEMO_BYTES`), and either fill no set or dict and make at most
:data:`_DEPTH_CAP` tuples, or make fewer than :data:`_SAME_HASH` keys of a
chosen hash (tuples and frozensets among them). Anything else (text
opcodes, ``LONG4``, a string of 256 bytes or more, bytes after STOP) does
not match and goes to the machine; so does every stream when the limits are
below what the scan lets through (``max_depth`` under :data:`_DEPTH_CAP`,
``max_alloc_bytes`` under :data:`_MEMO_BYTES`), and the first streams of a
process that need the scan, before compiling it pays
(:data:`.quick_scan.SCANS_BEFORE_COMPILING`).

Whatever the C unpickler raises, the stream goes to the machine, which gives
its result or says what is wrong, as without this path.
"""

import io
import pickle
import struct

from ..container.compact import (DATA, END_MAGIC, HEAD, HEAD_FORMAT, OVERHEAD, compact_split,
                                 small_bytes_stream, stream_checksum)
from ..format.limits import DEFAULT, STR_HASH_PREDICTABLE
from .quick_scan import paid_scan

#: Largest pickle stream the quick path takes. Below the machine's opcodes
#: between two looks at the clock, so that its only look is at the start.
QUICK_UP_TO = 8192
#: What :func:`quick_load` returns for a stream it leaves to the machine.
NOT_QUICK = object()
#: Deepest nesting of tuples and frozensets taken, whatever ``max_depth``
#: allows: hashing one recurses in C as deep as it nests.
_DEPTH_CAP = 100
#: Keys of one container with one hash that the machine accepts.
_SAME_HASH = 16
#: ``LONG_BINPUT`` indices the exact scan takes: below the opcodes a stream
#: the quick path takes can hold, so that the C unpickler's memo (twice the
#: largest index, 8 bytes a slot) stays below :data:`_MEMO_BYTES`.
PUT_BELOW = QUICK_UP_TO
#: What the exact scan lets the C unpickler's memo take; a load whose
#: ``max_alloc_bytes`` is smaller is left to the byte checks.
_MEMO_BYTES = 16 * PUT_BELOW


#: The classes that keep a stream from the commonest verdict (a frame over
#: plain data, :data:`_FRAMED_PLAIN`): their marks have the top bit set, so
#: that a stream holding none of them translates to ASCII.
_NOT_PLAIN = "XNGTZDE"


def _mark(letter):
    return ord(letter) | (0x80 if letter in _NOT_PLAIN else 0)


def _classes(**members):
    """A ``bytes.translate`` table: each byte of ``members[letter]`` to
    ``_mark(letter)``, every other byte to ``.``."""
    table = bytearray(b"." * 256)
    for letter, values in members.items():
        for value in values:
            table[value] = _mark(letter)
    return bytes(table)


#: What the tests below look at in a byte: ``X`` sends a stream to the
#: machine (LONG_BINPUT, BYTEARRAY8, EXT1/2/4); ``N`` a newline (GLOBAL,
#: INST, PERSID and every text opcode need one), ``G`` STACK_GLOBAL, ``P``
#: PUT, ``M`` FRAME; ``T`` makes a tuple, ``Z`` a frozenset (and fills it),
#: ``H`` another key whose hash a stream can choose, ``D`` a LONG4, ``E`` a
#: LONG1, ``I`` a text integer (both choose their hash too); ``F`` fills a
#: set or a dict. A stream translates to ASCII when it holds no byte of the
#: classes in _NOT_PLAIN.
BYTE_CLASSES = _classes(X=b"r\x96\x82\x83\x84", N=b"\n", G=b"\x93", P=b"p", M=b"\x95",
                        T=b")t\x85\x86\x87", Z=b"\x91",
                        H=b"GF" + (b"\x8cX\x8dUTSVCB\x8e" if STR_HASH_PREDICTABLE else b""),
                        D=b"\x8b", E=b"\x8a", I=b"IL", F=b"sud\x90")
#: The marks of the classes of keys whose hash a stream can choose, and of
#: those :func:`_verdict_of` looks for, as ``bytes``.
_CHOSEN_ONE = [bytes([_mark(letter)]) for letter in "TZHDEI"]
_X, _N, _G, _T, _Z, _D, _E, _P, _M, _I, _F = (bytes([_mark(c)]) for c in "XNGTZDEPMIF")
_FILL, _CHOSEN, _TEXT_INT = _mark("F"), _mark("H"), _mark("I")  # as ints: found quicker
#: What :func:`_verdict_of` says of a stream left to the machine.
_FAIL = "fail"
#: Verdicts of the streams with few bytes looked at, by those bytes' classes.
_verdicts = {}


class _Refusing(pickle.Unpickler):
    """The C unpickler, resolving no global and no persistent id."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError("the quick path resolves no global")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("the quick path resolves no persistent id")


_unpickle = pickle.loads
#: The verdict of a stream the C unpickler loads as it is when a frame spans
#: all of it, the commonest: :func:`_verdict_of` gives this very tuple.
_FRAMED_PLAIN = (True, _unpickle, None)
#: LONG_BINPUT's byte, as an int (``in`` finds one quicker than a bytes).
_LONG_BINPUT = pickle.LONG_BINPUT[0]
#: The length of the FRAME at offset 3 (after PROTO): as a tuple. And a
#: stream's first opcode, the third and the eight bytes after it: what PROTO,
#: FRAME and the frame's length give when a frame opens the stream.
_frame_length = struct.Struct("<Q").unpack_from
_proto_frame = struct.Struct("<BxBQ").unpack_from


def _refusing_loads(stream):
    return _Refusing(io.BytesIO(stream)).load()


#: id(Limits) -> (Limits, largest stream, bits of the largest integer the
#: machine builds, deepest nesting taken, whether the exact scan may take a
#: stream); by identity, as hashing a Limits costs more than a load.
_bounds = {}


def _bounds_of(limits):
    bound = _bounds.get(id(limits))
    if bound is None or bound[0] is not limits:
        # The machine charges at most 32 bytes per opcode (a dict entry)
        # against max_alloc_bytes + 16 per byte of the stream.
        largest = min(QUICK_UP_TO, limits.max_opcodes, limits.max_objects,
                      limits.max_alloc_bytes // 16)
        if limits.max_seconds < 1:  # its one look at the clock might refuse
            largest = -1
        if len(_bounds) > 64:
            _bounds.clear()
        bound = _bounds[id(limits)] = (
            limits, largest, int(limits.max_digits * 3.33) + 8, min(limits.max_depth, _DEPTH_CAP),
            limits.max_depth >= _DEPTH_CAP and limits.max_alloc_bytes >= _MEMO_BYTES)
    return bound


_DEFAULT_BOUND = _bounds_of(DEFAULT)
assert _DEFAULT_BOUND[1] == QUICK_UP_TO


def _verdict_of(marks):
    """``(needs a frame over the whole stream, how to load, counts)`` of a
    stream whose bytes' classes (``BYTE_CLASSES``) are ``marks``, or _FAIL;
    ``counts``, None when there is nothing to count, is ``(may hold a long
    integer, holds a LONG1, tuple and frozenset opcodes, may be a collision
    flood)``."""
    if _X in marks or _N in marks and _P in marks:  # a PUT may be in it
        return _FAIL
    load = _refusing_loads if _N in marks or _G in marks else _unpickle
    digits = _D in marks or _N in marks and _I in marks
    nests = marks.count(_T) + marks.count(_Z)
    flood = len(marks) > _SAME_HASH and (_F in marks or _Z in marks) and sum(
        map(marks.count, _CHOSEN_ONE)) > _SAME_HASH
    long1 = _E in marks
    counts = (digits, long1, nests, flood) if digits or long1 or nests or flood else None
    verdict = (_M in marks, load, counts)
    if verdict == _FRAMED_PLAIN:
        verdict = _FRAMED_PLAIN  # recognised by identity in quick_load
    if len(marks) <= _SAME_HASH:
        if len(_verdicts) > 4096:
            _verdicts.clear()
        _verdicts[marks] = verdict
    return verdict


def _exact_scan(now=False):
    """``fullmatch`` of the pattern of the streams the exact scan takes (see
    the module), or None while the process has not paid for compiling it
    (:func:`.quick_scan.paid_scan`; ``now``: compiled now if it is not)."""
    return paid_scan(now, _SAME_HASH, _DEPTH_CAP, PUT_BELOW, STR_HASH_PREDICTABLE)


def _scanned_load(stream, n, bound):
    """:func:`quick_load` of a stream of ``n`` bytes (at most ``bound[1]``)
    that the byte checks leave to the machine: its object if the exact scan
    takes it, else NOT_QUICK."""
    if not bound[4] or bound[2] < 8 * 255 and b"\x8a" in stream:
        return NOT_QUICK  # limits below what the scan lets through
    scan = _exact_scan()
    if scan is None or scan(stream) is None:
        return NOT_QUICK
    if stream[2] == 0x95 and _frame_length(stream, 3)[0] != n - 11:
        return NOT_QUICK  # a frame that ends before the stream
    try:
        return _unpickle(stream)
    except Exception:  # noqa: BLE001 - the machine says what is wrong
        return NOT_QUICK


#: A stream past the plain test and shorter than this is no collision flood
#: the machine refuses: its only keys of a chosen hash are floats (no small
#: int is counted; strings and bytes hash with the process's secret unless
#: it is fixed), and a flood takes _SAME_HASH + 1 of them, 9-byte BINFLOATs.
_NO_FLOOD_BELOW = 0 if STR_HASH_PREDICTABLE else (_SAME_HASH + 1) * 9
#: Sizes of compact dumps: the largest taken, those whose stream cannot flood,
#: and (plus the frame's length) one whose stream is a frame after PROTO.
_LARGEST_DUMP, NO_FLOOD_DUMP = OVERHEAD + QUICK_UP_TO, OVERHEAD + _NO_FLOOD_BELOW
_FRAME_AFTER = OVERHEAD + 11
#: What opens a compact dump of a protocol 5 stream in one frame, as dumps
#: writes it, from its length, DATA, these opcodes and the frame's length.
_pack_framed_head = struct.Struct(HEAD_FORMAT + "3sQ").pack
_PROTO5_FRAME = pickle.PROTO + b"\x05" + pickle.FRAME


#: How many sizes of compact dumps :func:`compact_quick_load` keeps the
#: checks of at once (each about 700 bytes).
SIZES_KEPT = 512
#: Size of a compact dump -> ``(head, after, split, before_checksum)``:
#: ``head`` the bytes that open it when a frame of protocol 5 holds its whole
#: stream, ``after`` the first string of as many bytes that sorts after
#: ``head`` (a ``bytes`` ``b`` longer than ``head`` starts with it exactly
#: when ``head <= b < after``, compared without a slice), then
#: :func:`~cpersist.container.compact.compact_split` of its stream's length.
#: A list (indexed quicker than a dict), _UNKNOWN where none is kept. With
#: :data:`BYTE_CLASSES` and :data:`NO_FLOOD_DUMP`, what :func:`cpersist.loads`
#: needs to take this path's commonest case itself.
_UNKNOWN = (b"", b"", None, None)
framed_checks = [_UNKNOWN] * (_LARGEST_DUMP + 1)
_sizes_kept = []


def _keep_checks(size):
    """Keep ``framed_checks[size]`` (of a size the quick path takes framed)."""
    head = _pack_framed_head(HEAD, size - OVERHEAD, DATA, _PROTO5_FRAME, size - _FRAME_AFTER)
    after = (int.from_bytes(head, "big") + 1).to_bytes(len(head), "big")  # head starts 0x89
    if len(_sizes_kept) >= SIZES_KEPT:
        for kept in _sizes_kept:
            framed_checks[kept] = _UNKNOWN
        _sizes_kept.clear()
    framed_checks[size] = (head, after, *compact_split(size - OVERHEAD))
    _sizes_kept.append(size)


def keep_framed_checks(size):
    """Keep :data:`framed_checks` of a compact dump of ``size`` bytes for a
    trusted :func:`cpersist.loads`, which compares the same bytes, while
    fewer than :data:`SIZES_KEPT` sizes are kept: it never drops those of
    other sizes, so that loads of dumps of many sizes cost no more than
    without the checks."""
    if len(_sizes_kept) < SIZES_KEPT and size > _FRAME_AFTER and framed_checks[size] is _UNKNOWN:
        _keep_checks(size)


def compact_quick_load(data):
    """:func:`quick_load` of the stream of ``data`` (``bytes``) under the
    default limits if ``data`` is one intact compact dump of a stream of at
    most :data:`QUICK_UP_TO` bytes, else :data:`NOT_QUICK`. Specialised for
    speed (a call costs a tenth of the load) for a stream in one frame of
    protocol 5: its bytes are compared with those a dump of its size has
    (:data:`framed_checks`), the commonest verdict (:data:`_FRAMED_PLAIN`)
    tested on its translation, any other given by :func:`quick_load`'s
    checks. :func:`cpersist.loads` writes out its first case (a stream
    shorter than a flood): a change to it is a change to both."""
    try:
        head, after, split, before_checksum = framed_checks[size := len(data)]
    except IndexError:
        return NOT_QUICK  # too large
    if not head <= data < after:
        return _other_quick_load(data, size)
    stream, tail, checksum, end_magic = split(data)
    if not (tail == before_checksum and end_magic == END_MAGIC
            and checksum == stream_checksum(stream)):
        return NOT_QUICK
    # A short stream (no flood) is translated at once; a longer one is not
    # when it has LONG_BINPUT's byte, as the scan does without.
    if size < NO_FLOOD_DUMP or _LONG_BINPUT not in stream:
        classes = stream.translate(BYTE_CLASSES)
        # Ascii: LONG_BINPUT's byte (in _NOT_PLAIN's classes) is not in it either.
        if classes.isascii() and (size < NO_FLOOD_DUMP or _FILL not in classes or classes.count(
                _CHOSEN) + classes.count(_TEXT_INT) <= _SAME_HASH):
            try:
                return _unpickle(stream)
            except Exception:  # noqa: BLE001 - the machine says what is wrong
                return NOT_QUICK
        if _LONG_BINPUT not in stream:
            return _classified_load(stream, size - OVERHEAD, _DEFAULT_BOUND, classes)
    return _scanned_load(stream, size - OVERHEAD, _DEFAULT_BOUND)


def _other_quick_load(data, size):
    """:func:`compact_quick_load` of ``data`` of ``size`` bytes (at most
    _LARGEST_DUMP) whose checks are not kept, or whose stream is not one
    frame of protocol 5: :func:`quick_load`'s, the checks of a size not kept
    made for its next dump."""
    if framed_checks[size] is _UNKNOWN and size > _FRAME_AFTER:
        _keep_checks(size)
    stream = small_bytes_stream(data)
    return NOT_QUICK if stream is None else quick_load(stream, DEFAULT)


def quick_load(stream, limits):
    """The object of the pickle stream ``stream`` (bytes), as a restricted
    load under ``limits`` would build it; :data:`NOT_QUICK` when this module
    cannot prove that the C unpickler builds the same (see the module).
    Not for a stream with out-of-band buffers: only the machine tells one
    that leaves some of them untaken."""
    n = len(stream)
    if limits is DEFAULT and n <= QUICK_UP_TO:
        bound = _DEFAULT_BOUND
    elif n > (bound := _bounds_of(limits))[1]:
        return NOT_QUICK
    if _LONG_BINPUT in stream:  # its byte, or an argument's: the scan tells
        return _scanned_load(stream, n, bound)
    return _classified_load(stream, n, bound, stream.translate(BYTE_CLASSES))


def _classified_load(stream, n, bound, classes):
    """:func:`quick_load` of a stream with no LONG_BINPUT byte, translated by
    :data:`BYTE_CLASSES` to ``classes``: the bytes looked at, by class, are those
    left once ``.`` is deleted (quicker than deleting the 230 others)."""
    marks = classes.translate(None, b".")
    verdict = _verdicts.get(marks)
    # The commonest verdict first, its test written out: a small object's
    # stream needs nothing but a frame over all of it.
    if verdict is _FRAMED_PLAIN and n > 11 and _proto_frame(stream) == (0x80, 0x95, n - 11):
        try:
            return _unpickle(stream)
        except Exception:  # noqa: BLE001 - the machine says what is wrong
            return NOT_QUICK
    if not marks:
        load = _unpickle
    else:
        if verdict is None:
            verdict = _verdict_of(marks)
        if verdict is _FAIL:
            return _scanned_load(stream, n, bound)
        framed, load, counts = verdict
        if framed and not (n > 11 and _proto_frame(stream) == (0x80, 0x95, n - 11)):
            return NOT_QUICK  # a frame that ends before the stream, or none at its start
        if counts is not None:
            digits, long1, nests, flood = counts
            int_bits = bound[2]
            if (flood or nests > bound[3] or digits and 8 * n > int_bits
                    or long1 and int_bits < 8 * 255):
                return _scanned_load(stream, n, bound)
    try:
        return load(stream)
    except Exception:  # noqa: BLE001 - the machine says what is wrong
        return NOT_QUICK
