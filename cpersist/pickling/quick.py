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
  byte, or a ``p`` byte and a newline, is left to the machine. Integers the
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
  opcode across a frame's end, which the C unpickler reads on).

Whatever the C unpickler raises, the stream goes to the machine, which gives
its result or says what is wrong, as without this path.
"""

import io
import pickle

from ..format.limits import DEFAULT, STR_HASH_PREDICTABLE

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


def _classes(**members):
    """A ``bytes.translate`` table: each byte of ``members[letter]`` to
    ``letter``, every other byte to ``.``."""
    table = bytearray(b"." * 256)
    for letter, values in members.items():
        for value in values:
            table[value] = ord(letter)
    return bytes(table)


#: What the tests below look at in a byte: ``X`` sends a stream to the
#: machine (LONG_BINPUT, BYTEARRAY8, EXT1/2/4); ``N`` a newline (GLOBAL,
#: INST, PERSID and every text opcode need one), ``G`` STACK_GLOBAL, ``P``
#: PUT, ``M`` FRAME; ``T`` makes a tuple, ``Z`` a frozenset (and fills it),
#: ``H`` another key whose hash a stream can choose, ``D`` a LONG4, ``E`` a
#: LONG1, ``I`` a text integer (both choose their hash too); ``F`` fills a
#: set or a dict.
_CLASS = _classes(X=b"r\x96\x82\x83\x84", N=b"\n", G=b"\x93", P=b"p", M=b"\x95",
                  T=b")t\x85\x86\x87", Z=b"\x91",
                  H=b"GF" + (b"\x8cX\x8dUTSVCB\x8e" if STR_HASH_PREDICTABLE else b""),
                  D=b"\x8b", E=b"\x8a", I=b"IL", F=b"sud\x90")
#: The classes of the keys whose hash a stream can choose.
_CHOSEN_ONE = [bytes([letter]) for letter in b"TZHDEI"]
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


def _refusing_loads(stream):
    return _Refusing(io.BytesIO(stream)).load()


#: id(Limits) -> (Limits, largest stream, bits of the largest integer the
#: machine builds); by identity, as hashing a Limits costs more than a load.
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
        bound = _bounds[id(limits)] = (limits, largest, int(limits.max_digits * 3.33) + 8)
    return bound


_DEFAULT_BOUND = _bounds_of(DEFAULT)


def _verdict_of(marks):
    """``(needs a frame over the whole stream, how to load, may hold a long
    integer, holds a LONG1, tuple and frozenset opcodes)`` of a stream whose
    bytes' classes (``_CLASS``) are ``marks``, or _FAIL."""
    if b"X" in marks or b"N" in marks and b"P" in marks:  # a PUT may be in it
        return _FAIL
    load = _refusing_loads if b"N" in marks or b"G" in marks else pickle.loads
    digits = b"D" in marks or b"N" in marks and b"I" in marks
    nests = marks.count(b"T") + marks.count(b"Z")
    verdict = (b"M" in marks, load, digits, b"E" in marks, nests)
    if len(marks) <= _SAME_HASH:
        if len(_verdicts) > 4096:
            _verdicts.clear()
        _verdicts[marks] = verdict
    return verdict


def quick_load(stream, limits):
    """The object of the pickle stream ``stream`` (bytes), as a restricted
    load under ``limits`` would build it; :data:`NOT_QUICK` when this module
    cannot prove that the C unpickler builds the same (see the module)."""
    n = len(stream)
    bound = _DEFAULT_BOUND if limits is DEFAULT else _bounds.get(id(limits))
    if bound is None or bound[0] is not limits:
        bound = _bounds_of(limits)
    if n > bound[1]:
        return NOT_QUICK
    # The bytes looked at, by class (deleting one byte after translating
    # costs less than deleting the 230 others in one call).
    marks = stream.translate(_CLASS).translate(None, b".")
    if not marks:
        load = pickle.loads
    else:
        verdict = _verdicts.get(marks) if len(marks) <= _SAME_HASH else None
        if verdict is None:
            verdict = _verdict_of(marks)
        if verdict is _FAIL:
            return NOT_QUICK
        framed, load, digits, long1, nests = verdict
        if framed and not (n > 11 and stream[0] == 0x80 and stream[2:11] == b"\x95" + (
                n - 11).to_bytes(8, "little")):
            return NOT_QUICK  # a frame that ends before the stream, or none at its start
        int_bits = bound[2]
        if (digits and 8 * n > int_bits or long1 and int_bits < 8 * 255
                or nests > limits.max_depth or nests > _DEPTH_CAP):
            return NOT_QUICK
        if len(marks) > _SAME_HASH and (b"F" in marks or b"Z" in marks) and sum(
                map(marks.count, _CHOSEN_ONE)) > _SAME_HASH:
            return NOT_QUICK
    try:
        return load(stream)
    except Exception:  # noqa: BLE001 - the machine says what is wrong
        return NOT_QUICK
