"""The restricted load's quick path (:mod:`cpersist.pickling.quick`): where it
takes a stream, the object is the one the restricted machine builds; where a
check fails, the machine decides, with its own outcome."""

import io
import os
import pickle
import pickletools
import random
import struct
import subprocess
import sys

import pytest

import cpersist
from cpersist.container.compact import compact_dump
from cpersist.pickling import restricted
from cpersist._args import check_limits
from cpersist.format.limits import DEFAULT
from cpersist.pickling import quick_scan
from cpersist.pickling.quick import NOT_QUICK, PUT_BELOW, compact_quick_load, quick_load
from cpersist.pickling.unpickler import ArrayUnpickler


@pytest.fixture(autouse=True)
def _scan_at_once(monkeypatch):
    """The exact scan takes its streams from the first (a process otherwise
    leaves the first ``SCANS_BEFORE_COMPILING`` to the machine)."""
    monkeypatch.setattr(quick_scan, "SCANS_BEFORE_COMPILING", 0)


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
    body = b"\x8c\x02gc\x8c\x07disable\x93)R."
    for stream in (b"\x80\x02cgc\ndisable\n)R.",  # GLOBAL: a newline
                   b"\x80\x04" + body,  # STACK_GLOBAL: none
                   b"\x80\x05\x95" + struct.pack("<Q", len(body)) + body):  # in a frame
        for _ in range(2):  # the second with the checks its size's first keeps
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


def test_a_short_frame_is_refused_once_its_kind_of_stream_was_taken():
    """The verdict on a stream's bytes is kept by their classes, and the
    commonest one, a frame over the whole stream and nothing else, is tested
    first: the frame is still checked for each stream of that kind."""
    whole = b"\x80\x04\x95" + struct.pack("<Q", 6) + b"\x8c\x03abc."
    # Its frame ends inside the string, which the C unpickler reads on.
    short = b"\x80\x04\x95" + struct.pack("<Q", 3) + b"\x8c\x03abc."
    assert pickle.loads(short) == "abc"
    for _ in range(2):  # the second time, by the kept verdict
        assert quick_load(whole, DEFAULT) == "abc"
        assert quick_load(short, DEFAULT) is NOT_QUICK
    assert loaded(short) == machine(short) == ("error", cpersist.CorruptFileError)


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
            "m._hashes.values())); "
            # The exact scan (an "r" in each key) counts them too, taking fewer than 16.
            "from cpersist.pickling import quick_scan; quick_scan.SCANS_BEFORE_COMPILING = 0; "
            "from cpersist.pickling.quick import quick_load, NOT_QUICK; "
            "print(*(quick_load(pickle.dumps({f'r{i}': i for i in range(n)}, 5), limits.DEFAULT) "
            "is not NOT_QUICK for n in (15, 17)))")
    for seed, expected in (("0", "True 3 True False"), ("12345", "True 3 True False"),
                           ("random", "False 0 True True")):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True, cwd=os.path.dirname(os.path.dirname(
                                 os.path.abspath(__file__)))).stdout.split()
        assert " ".join(out) == expected, seed


# -- the exact scan: streams holding an "r" (LONG_BINPUT's byte) -----------------

def exact(obj, seen=None):
    """:func:`typed`, floats by their bits (NaN equals itself, -0.0 not 0.0)."""
    seen = {} if seen is None else seen
    if type(obj) is float:
        return float, struct.pack(">d", obj)
    if id(obj) in seen:
        return ("cycle", seen[id(obj)])
    seen[id(obj)] = len(seen)
    kind = type(obj)
    if kind in (list, tuple):
        return kind, tuple(exact(x, seen) for x in obj)
    if kind is dict:
        return kind, tuple((exact(k, seen), exact(v, seen)) for k, v in obj.items())
    if kind in (set, frozenset):
        return kind, frozenset(exact(x, {}) for x in obj)
    return kind, obj


def run_puts(stream):
    """The LONG_BINPUT indices among the opcodes the C unpickler runs: up to
    STOP, or to the first it cannot read."""
    puts = []
    try:
        for opcode, arg, _ in pickletools.genops(stream):
            if opcode.name == "LONG_BINPUT":
                puts.append(arg)
    except ValueError:
        pass
    return puts


def check_quick(stream, limits=DEFAULT):
    """Where the quick path takes ``stream``, it ran no LONG_BINPUT of a large
    index and built what the machine builds; a restricted ``loads`` then
    gives the machine's outcome. Whether it took it."""
    quick = quick_load(stream, limits)
    if quick is NOT_QUICK:
        return False
    assert max(run_puts(stream), default=0) < PUT_BELOW, stream
    outcome, built = machine(stream, limits)
    assert outcome == "ok", (stream, built)
    assert exact(quick) == exact(built), stream
    return True


def test_the_scan_takes_data_holding_r_and_leaves_large_puts_to_the_machine():
    english = {"learning_rate": 3e-4, "optimizer": "adamw", "layers": [128, 64],
               "dropout": 0.1, "warmup_steps": 500}
    rng = random.Random(5)
    for protocol in (2, 3, 4, 5):
        for obj in (english, [rng.random() for i in range(200)],
                    {"k": list(range(1000)), "s": "x" * 100},
                    {b"r\xff\xff\xff\x7f" if protocol > 2 else "rrr":  # protocol 2: a global
                     "r\x00\x00\x00\x10" * 3, "r": 2 ** 70},
                    list(range(300)) * 2, [(i, "run") for i in range(12)]):
            stream = pickle.dumps(obj, protocol)
            assert 114 in stream and check_quick(stream), (protocol, obj)
            assert loaded(stream) == ("ok", obj)
    # LONG_BINPUT itself, as protocols 2 and 3 write past 256 memoized objects:
    # an index below PUT_BELOW is taken, one from it on is not.
    memoized = pickle.dumps([[n] for n in range(400)], 2)
    assert b"r" + struct.pack("<I", 399) in memoized and check_quick(memoized)
    for index, taken in ((PUT_BELOW - 1, True), (PUT_BELOW, False), (1 << 20, False),
                         (2 ** 31 - 1, False), (2 ** 32 - 1, False)):
        after_key = (b"\x80\x05}\x94(\x8c\x0dlearning_rate\x94N" + pickle.LONG_BINPUT
                     + struct.pack("<I", index) + b"u.")
        assert check_quick(after_key) is taken, index
        assert loaded(after_key) == ("ok", {"learning_rate": None})
    # Limits below what the scan lets through leave the stream to the machine.
    for limits in (cpersist.Limits(max_depth=99), cpersist.Limits(max_alloc_bytes=100_000)):
        assert quick_load(pickle.dumps(english, 5), check_limits(limits)) is NOT_QUICK


def _opcode_pieces():
    """Opcodes with their arguments, ``r`` bytes and large LONG_BINPUT indices
    among them (in arguments and as opcodes), and what the scan refuses."""
    from hypothesis import strategies as st

    P = pickle
    index = st.sampled_from([0, 1, 2, 5, 255, 256, PUT_BELOW - 1, PUT_BELOW, 1 << 20])
    data = st.one_of(st.binary(max_size=12), st.sampled_from(
        [b"r", b"r\x00\x00\x10\x00", b"learning_rate", b"\xff\xff\xff\x7fr", b"rrrr"]))
    no_argument = (P.MARK + P.POP + P.POP_MARK + P.DUP + P.NONE + P.NEWTRUE + P.NEWFALSE
                   + P.EMPTY_LIST + P.EMPTY_DICT + P.EMPTY_SET + P.EMPTY_TUPLE + P.APPEND
                   + P.APPENDS + P.LIST + P.TUPLE + P.TUPLE1 + P.TUPLE2 + P.TUPLE3 + P.DICT
                   + P.SETITEM + P.SETITEMS + P.ADDITEMS + P.FROZENSET + P.MEMOIZE + P.STOP
                   + P.BUILD + P.REDUCE + P.STACK_GLOBAL + P.NEXT_BUFFER + P.READONLY_BUFFER)
    return st.one_of(
        st.sampled_from([bytes([b]) for b in no_argument]),
        st.binary(min_size=1, max_size=1).map(lambda b: P.BININT1 + b),
        st.binary(min_size=2, max_size=2).map(lambda b: P.BININT2 + b),
        st.binary(min_size=4, max_size=4).map(lambda b: P.BININT + b),
        st.binary(min_size=8, max_size=8).map(lambda b: P.BINFLOAT + b),
        st.floats(allow_nan=False).map(lambda f: P.BINFLOAT + struct.pack(">d", f)),
        st.binary(max_size=9).map(lambda b: P.LONG1 + bytes([len(b)]) + b),
        data.map(lambda b: P.SHORT_BINUNICODE + bytes([len(b)]) + b),
        data.map(lambda b: P.SHORT_BINBYTES + bytes([len(b)]) + b),
        data.map(lambda b: P.BINUNICODE + struct.pack("<I", len(b)) + b),
        data.map(lambda b: P.BINBYTES + struct.pack("<I", len(b)) + b),
        st.integers(0, 5).map(lambda n: P.BINGET + bytes([n])),
        st.integers(0, 5).map(lambda n: P.BINPUT + bytes([n])),
        index.map(lambda n: P.LONG_BINGET + struct.pack("<I", n)),
        index.map(lambda n: P.LONG_BINPUT + struct.pack("<I", n)),
        st.sampled_from([P.BYTEARRAY8 + struct.pack("<Q", 1) + b"r", P.EXT1 + b"\x01",
                         P.LONG4 + struct.pack("<I", 1) + b"r", P.FRAME + struct.pack("<Q", 3),
                         P.PROTO + b"\x05", b"r"]),
    )


def test_quick_path_and_machine_agree_on_generated_streams():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=int(os.environ.get("CPERSIST_DIFF_EXAMPLES", "1500")))
    @given(st.integers(2, 5), st.booleans(), st.lists(_opcode_pieces(), max_size=24),
           st.binary(max_size=2))
    def agree(protocol, framed, pieces, after):
        body = b"".join(pieces) + pickle.STOP + after
        if framed:  # a frame over the rest of the stream, as a dump writes it
            body = pickle.FRAME + struct.pack("<Q", len(body)) + body
        stream = pickle.PROTO + bytes([protocol]) + body
        check_quick(stream)

    agree()


def test_quick_path_and_machine_agree_on_mutated_streams():
    rng = random.Random(11)
    objects = [{"learning_rate": 3e-4, "layers": [128, 64], "betas": (0.9, 0.999), "r": None},
               [rng.random() for _ in range(40)], {"k": list(range(300)), "s": "error"},
               [(i, "run", i / 3) for i in range(8)], {frozenset({1.5, "r"}): {2 ** 40, b"r"}}]
    genuine = [pickle.dumps(obj, protocol) for protocol in (2, 3, 4, 5) for obj in objects]
    taken = 0
    for _ in range(3000):
        stream = bytearray(rng.choice(genuine))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(stream))
            if rng.random() < 0.5:
                stream[at] = rng.choice([rng.randrange(256), 114])
            else:  # a LONG_BINPUT in an argument or between opcodes
                stream[at:at] = pickle.LONG_BINPUT + struct.pack(
                    "<I", rng.choice([3, PUT_BELOW - 1, PUT_BELOW, 1 << 20]))
        taken += check_quick(bytes(stream))
    assert taken > 100  # mutants of the scan's language are checked, not only refused


def test_the_compact_quick_path_takes_only_what_the_machine_builds():
    """``compact_quick_load`` (a restricted ``loads`` of a small compact dump)
    tests the commonest verdict itself, and counts the bytes of chosen-hash
    keys only in a stream long enough to hold a flood: a stream it takes is
    one the machine builds the same; a float flood is left to the machine."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    def check(stream):
        """Whether the checks kept for the dump's size take it (the first
        load of a size, by quick_load's checks, keeps them), each load that
        takes it giving what the machine builds; and a restricted ``loads``
        (which takes the commonest case itself) says what the machine says."""
        data, built = compact_dump(stream), machine(stream)
        for _ in range(2):
            quick = compact_quick_load(data)
            if quick is not NOT_QUICK:
                assert built[0] == "ok" and exact(quick) == exact(built[1]), stream
            said = loaded(stream)
            assert said[0] == built[0] and (exact(said[1]) == exact(built[1]) if said[0] == "ok"
                                            else said[1] == built[1]), stream
        return quick is not NOT_QUICK

    # More than 16 bytes of chosen-hash classes in a string, in a short stream.
    assert check(pickle.dumps({"GFIL" * 5: 1.5, "b": None}, 5))
    floats = [struct.unpack(">d", SAME_HASH_FLOATS[9 * k + 1:9 * k + 9])[0] for k in range(17)]
    # Also one whose bytes are all of plain classes: only the count refuses it.
    plain = [2.0 ** (61 * k) for k in range(17)]
    for flood in (dict.fromkeys(floats, 0), set(floats), dict.fromkeys(plain, 0), set(plain)):
        stream = pickle.dumps(flood, 5)
        assert not check(stream) and loaded(stream) == machine(stream)
        assert machine(stream)[0] == "error"
    check(pickle.dumps(dict.fromkeys(floats[:16], 0), 5))
    # A damaged dump, in the frame's length or after it, goes to the reader.
    for at in (80, 84):
        damaged = bytearray(compact_dump(pickle.dumps({"a": 1}, 5)))
        damaged[at] ^= 1
        assert compact_quick_load(bytes(damaged)) is NOT_QUICK
        with pytest.raises(cpersist.CorruptFileError):
            cpersist.loads(bytes(damaged), trusted=False)

    @settings(max_examples=int(os.environ.get("CPERSIST_DIFF_EXAMPLES", "1500")))
    @given(st.lists(_opcode_pieces(), max_size=24), st.binary(max_size=2))
    def agree(pieces, after):
        body = b"".join(pieces) + pickle.STOP + after
        check(b"\x80\x05" + pickle.FRAME + struct.pack("<Q", len(body)) + body)

    agree()


def _outcome(load):
    try:
        return "ok", exact(load())
    except cpersist.CpersistError as exc:
        return "error", type(exc)


def test_a_damaged_head_or_tail_is_refused_at_every_size():
    """A byte changed before or after the stream of a compact dump, at each
    size class the quick path tells apart (a stream without a frame, the
    shortest framed one, one long enough to count a flood, the longest taken,
    one past it, protocol 2): the restricted ``loads`` says what the trusted
    one says of it (both take a stream intact whatever the header's reserved
    bytes hold, and refuse a damaged DATA record header), and the quick path
    takes no byte it compares."""
    from cpersist.pickling import quick

    longest = "s" * (quick.QUICK_UP_TO - 18)  # a stream of QUICK_UP_TO bytes
    cases = [(None, 5), (1000, 5), ({"a": 1, "b": 2.0, "c": "x"}, 5), ([0.5] * 40, 5),
             (longest, 5), (longest + "s", 5), ({"a": 1}, 2)]
    sizes = []
    for obj, protocol in cases:
        data = cpersist.dumps(obj, protocol=protocol)
        sizes.append(len(data))
        assert (compact_quick_load(data) is NOT_QUICK) == (len(data) > quick._LARGEST_DUMP)
        for at in [*range(83), *range(len(data) - 40, len(data))]:
            damaged = bytearray(data)
            damaged[at] ^= 0x41
            damaged = bytes(damaged)
            read = _outcome(lambda: cpersist.loads(damaged))
            assert _outcome(lambda: cpersist.loads(damaged, trusted=False)) == read, (obj, at)
            quick_path = compact_quick_load(damaged)
            if not 16 <= at < 64:  # all but the header's reserved bytes are compared
                assert quick_path is NOT_QUICK, (obj, at)
            elif quick_path is not NOT_QUICK:
                assert read == ("ok", exact(obj)), (obj, at)
    assert sizes[:2] == [quick.OVERHEAD + 4, quick._FRAME_AFTER + 4]  # unframed, shortest framed
    assert sizes[3] >= quick.NO_FLOOD_DUMP  # a stream that may hold a flood
    assert sizes[4:6] == [quick._LARGEST_DUMP, quick._LARGEST_DUMP + 1]


def test_the_checks_of_a_bounded_number_of_sizes_are_kept():
    """Past SIZES_KEPT sizes, those kept are dropped: each dump loads still.
    A trusted load keeps the checks of its size only while there is room,
    and drops none."""
    from cpersist.pickling import quick

    def kept():
        sizes = [size for size, checks in enumerate(quick.framed_checks)
                 if checks is not quick._UNKNOWN]
        assert len(sizes) <= quick.SIZES_KEPT and sorted(quick._sizes_kept) == sizes
        return sizes

    objects = ["x" * k for k in range(quick.SIZES_KEPT + 40)]
    for obj in objects + objects[:20]:
        assert cpersist.loads(cpersist.dumps(obj), trusted=False) == obj
        kept()
    longer = iter(range(len(objects), len(objects) + quick.SIZES_KEPT))
    while len(kept()) < quick.SIZES_KEPT:  # trusted loads fill the room left
        obj = "y" * next(longer)
        assert cpersist.loads(cpersist.dumps(obj)) == obj
    full = kept()
    for obj in ["z" * k for k in range(1000, 1100)] + objects[-20:]:
        assert cpersist.loads(cpersist.dumps(obj)) == obj
        assert kept() == full


def test_a_process_compiles_the_exact_scan_once_it_pays():
    """The first streams of a process that need the exact scan go to the
    machine, and the scan's pattern (tens of milliseconds to compile) is
    compiled only after ``SCANS_BEFORE_COMPILING`` of them: a process making
    a few restricted loads, or ``cpersist info``, never compiles it. Each
    load gives the same object either way."""
    code = ("import cpersist, pickle; from cpersist.pickling import quick, quick_scan; "
            "data = cpersist.dumps({'order': 'C', 'rows': [1, 2, 3]}); "
            "back = [cpersist.loads(data, trusted=False)]; "
            "first = quick_scan._compiled is not None; "
            "back += [cpersist.loads(data, trusted=False) "
            "         for _ in range(quick_scan.SCANS_BEFORE_COMPILING)]; "
            "taken = quick.quick_load(pickle.dumps({'r': 1}, 5), quick.DEFAULT); "
            "print(first, quick_scan._compiled is not None, taken == {'r': 1}, "
            "all(b == {'order': 'C', 'rows': [1, 2, 3]} for b in back))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "True", "True", "True"]
