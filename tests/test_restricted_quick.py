"""The restricted load's quick path (:mod:`cpersist.pickling.quick`): where it
takes a stream, the object is the one the restricted machine builds; where a
check fails, the machine decides, with its own outcome."""

import io
import os
import pickle
import struct
import subprocess
import sys

import pytest

import cpersist
from cpersist.container.compact import compact_dump
from cpersist.pickling import restricted
from cpersist._args import check_limits
from cpersist.format.limits import DEFAULT
from cpersist.pickling.quick import NOT_QUICK, quick_load
from cpersist.pickling.unpickler import ArrayUnpickler

def machine(stream, limits=DEFAULT):
    """The machine's outcome for ``stream``: ``("ok", object)`` or
    ``("error", exception type)``."""
    unpickler = ArrayUnpickler(io.BytesIO(stream), None, True, source="<s>")
    try:
        return "ok", restricted.run(stream, unpickler.resolve, unpickler.persistent_load,
                                    limits, "<s>", on_protocol=unpickler._set_protocol)
    except cpersist.CpersistError as exc:
        return "error", type(exc)


def loaded(stream, limits=None):
    """A restricted ``loads`` of ``stream`` in a compact dump (quick path first)."""
    try:
        return "ok", cpersist.loads(compact_dump(stream), trusted=False, limits=limits)
    except cpersist.CpersistError as exc:
        return "error", type(exc)


def typed(obj, seen=None):
    """``obj`` as nested (type, value) pairs, so that ``==`` tells ``1`` from
    ``1.0`` and ``True``, a list from a tuple, bytes from bytearray."""
    seen = {} if seen is None else seen
    if id(obj) in seen:
        return ("cycle", seen[id(obj)])
    seen[id(obj)] = len(seen)
    kind = type(obj)
    if kind in (list, tuple):
        return kind, tuple(typed(x, seen) for x in obj)
    if kind is dict:
        return kind, tuple((typed(k, seen), typed(v, seen)) for k, v in obj.items())
    if kind in (set, frozenset):
        return kind, frozenset(typed(x, {}) for x in obj)
    return kind, obj


def plain_objects():
    recursive = [1, "x"]
    recursive.append(recursive)
    shared = [1, 2]
    return [
        None, True, 0, -1, 255, 65536, 2 ** 31, -2 ** 63, 2 ** 200, -(2 ** 1000), 0.5, -1e300,
        float("inf"), "", "text with\nnewline and r p c i b", "\u00e9\U0001f600" * 10, b"",
        b"\x00\x80\xff" * 50, bytearray(b"abc"), (), (1,), (1, (2, (3, ()))), [], [1, [2, []]],
        {}, {"a": 1, "b": 2.0, "c": "x"}, {1: "one", 2.5: "float", (1, 2): "tuple"},
        set(), {1, 2, 3}, frozenset({"a", frozenset({1})}), {frozenset(): ()},
        dict((str(n), n) for n in range(100)), list(range(300)), [shared, shared],
        {"k": list(range(1000)), "s": "x" * 100}, [i / 7 for i in range(50)], recursive,
        {"model": {"layers": [64, 128], "dropout": 0.1}, "tags": ("a", "b"), "seed": 0},
        [(i, str(i)) for i in range(20)], {True: False, None: b"n"},
    ]


def test_quick_path_builds_what_the_machine_builds():
    taken = 0
    buffers = [pickle.PickleBuffer(b"read-only"), pickle.PickleBuffer(bytearray(b"writable"))]
    for protocol in range(6):
        for obj in plain_objects() + (buffers if protocol == 5 else []):
            stream = pickle.dumps(obj, protocol)
            quick = quick_load(stream, DEFAULT)
            outcome, built = machine(stream)
            assert outcome == "ok", (protocol, obj)
            if quick is not NOT_QUICK:
                taken += 1
                assert typed(quick) == typed(built), (protocol, obj)
            outcome, value = loaded(stream)
            assert outcome == "ok" and typed(value) == typed(built), (protocol, obj)
    # The checks may leave a stream to the machine, not every one of them.
    assert taken >= 100


def test_a_global_is_never_resolved_by_the_quick_path():
    """``gc.disable`` named in streams the quick path's byte checks let
    through: were the C unpickler run as pickle.loads runs, it would be
    called and leave the collector disabled (the machine refuses it)."""
    import gc

    assert gc.isenabled()
    for stream in (b"\x80\x02cgc\ndisable\n)R.",  # GLOBAL: a newline
                   b"\x80\x04\x8c\x02gc\x8c\x07disable\x93)R."):  # STACK_GLOBAL: none
        with pytest.raises(cpersist.UntrustedObjectError):
            cpersist.loads(compact_dump(stream), trusted=False)
        assert gc.isenabled()
        assert quick_load(stream, DEFAULT) is NOT_QUICK
        assert gc.isenabled()


SAME_HASH_FLOATS = b"".join(pickle.BINFLOAT + struct.pack(">d", 2.0 ** (61 * k))
                            for k in range(-8, 9))


@pytest.mark.parametrize("stream, limits", [
    # LONG_BINPUT and PUT of large indices: the C unpickler zeroes a memo of
    # twice the index (4 GiB); the machine keeps a dict.
    (b"\x80\x04N" + pickle.LONG_BINPUT + struct.pack("<I", 1 << 28) + b".", None),
    (b"Np268435456\n.", None),
    # Nesting past max_depth (the default's, and a custom one's).
    (b"\x80\x04\x8f(" + b")" + b"\x85" * 101 + b"\x90.", None),
    (b"\x80\x04)\x85\x85.", cpersist.Limits(max_depth=2)),
    # Custom limits smaller than the stream could use.
    (pickle.dumps(list(range(50)), 4), cpersist.Limits(max_objects=10)),
    (pickle.dumps(2 ** 2000, 4), cpersist.Limits(max_digits=100)),
    # 17 keys of one set with one hash: a collision flood to the machine.
    (b"\x80\x04\x8f(" + SAME_HASH_FLOATS + b"\x90.", None),
    # What the C unpickler lets a stream change and the machine does not.
    (b"\x80\x05\x96" + struct.pack("<Q", 4) + b"abcd2K\x00K\x00s0.", None),
    (b"\x80\x05\x96" + struct.pack("<Q", 4) + b"abcd\x98.", None),
    # A frame ending before an opcode does: the machine refuses the crossing.
    (b"\x80\x04\x95" + struct.pack("<Q", 2) + b"\x8c\x03abc.", None),
    # Out-of-band data, with no buffers to take it from.
    (b"\x80\x05\x97.", None),
    # A copyreg extension code, served by the C unpickler from a cache.
    (b"\x80\x02\x82\x01)R.", None),
])
def test_what_the_checks_leave_to_the_machine(stream, limits):
    limits_ = check_limits(limits)
    assert quick_load(stream, limits_) is NOT_QUICK
    assert loaded(stream, limits) == machine(stream, limits_)


def test_the_machine_accepts_what_the_c_unpickler_does_to_plain_data():
    """BUILD that sets nothing, and SETITEM by index on a list the stream
    made: the C unpickler accepts both, and so does the machine."""
    for stream, value in ((b"\x80\x05]Nb.", []),
                          (b"\x80\x05]K\x01aK\x00K\x05s.", [5]),
                          (b"\x80\x05}\x94(N}tb.", {})):
        assert machine(stream) == ("ok", value)
        assert quick_load(stream, DEFAULT) == value
    # A key already in a set is not counted again towards a collision flood.
    repeated = b"\x80\x04\x8f(" + SAME_HASH_FLOATS[:9] + b"2" * 30 + b"\x90."
    assert machine(repeated) == ("ok", {1.0 / 2 ** 488})


def test_deep_lists_and_dicts_load_without_crashing():
    """Lists and dicts nest as deep as a stream makes them (no hash recurses
    into them); every recursive C path over the result raises RecursionError."""
    depth = 100_000
    for stream in (b"\x80\x04" + b"(" * depth + b"]" + b"l" * depth + b".",
                   b"\x80\x04" + b"(K\x00" * depth + b"}" + b"d" * depth + b".",
                   # L = [] then, each time, L.append([]) and L = L[0], by the memo
                   b"\x80\x04]\x94" + b"".join(pickle.LONG_BINGET + struct.pack("<I", i)
                                               + b"]\x94a0" for i in range(depth)) + b"."):
        outcome, obj = loaded(stream)
        assert outcome == "ok"
        for _ in range(depth):
            obj = obj[0]
        with pytest.raises(RecursionError):
            repr(loaded(stream)[1])


def test_str_keys_are_counted_when_the_hash_seed_is_fixed():
    """With PYTHONHASHSEED fixed, a stream's author can compute colliding
    strings: str and bytes keys then count towards a collision flood."""
    code = ("import io, pickle; from cpersist.format import limits; "
            "from cpersist.pickling import restricted; from cpersist.pickling.machine import Machine; "
            "from cpersist.pickling.unpickler import ArrayUnpickler; "
            "s = pickle.dumps({'a': 1, b'b': 2, 'c': 3}, 4); "
            "u = ArrayUnpickler(io.BytesIO(s), None, True, source='<s>'); "
            "m = Machine(s, u.resolve, u.persistent_load, limits.DEFAULT, '<s>'); "
            "restricted.execute(m); print(limits.STR_HASH_PREDICTABLE, sum(len(h[1]) for h in "
            "m._hashes.values()))")
    for seed, expected in (("0", "True 3"), ("12345", "True 3"), ("random", "False 0")):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True, cwd=os.path.dirname(os.path.dirname(
                                 os.path.abspath(__file__)))).stdout.split()
        assert " ".join(out) == expected, seed
