"""Hostile pickle streams: one per known attack, and a generator of more.

Each stream is wrapped in a genuine cpersist file (correct checksums) by the
tests. Run as a program, this module loads the files named on its command
line under a memory limit (``resource.setrlimit``) and prints one JSON line
per file and reader: what happened, how long it took, the peak RSS.
"""

import json
import pickle
import struct
import sys

from ._forge import call, proto, s


def glob(module, name):
    """GLOBAL, the protocol 0 form every protocol accepts."""
    return pickle.GLOBAL + f"{module}\n{name}\n".encode()


def tup(*items):
    return pickle.MARK + b"".join(items) + pickle.TUPLE


def binbytes(data):
    return pickle.BINBYTES + struct.pack("<I", len(data)) + data


def integer(n):
    if -2**31 <= n < 2**31:
        return pickle.BININT + struct.pack("<i", n)
    raw = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return pickle.LONG1 + bytes([len(raw)]) + raw


def dtype(text):
    """``numpy.dtype(text, False, True)``, as numpy pickles a dtype."""
    return call(glob("numpy", "dtype"), s(text), pickle.NEWFALSE, pickle.NEWTRUE)


def dtype_state(text, state_ops):
    """A dtype given a forged state by BUILD."""
    return dtype(text) + state_ops + pickle.BUILD


def fields_state(name, field_dtype_ops, offset, itemsize, flags):
    return tup(integer(3), s("|"), pickle.NONE, tup(s(name)),
               pickle.EMPTY_DICT + s(name) + tup(field_dtype_ops, integer(offset))
               + pickle.SETITEM,
               integer(itemsize), integer(1), integer(flags))


def frombuffer(data, dtype_ops, count):
    return call(glob("numpy._core.numeric", "_frombuffer"), binbytes(data), dtype_ops,
                tup(integer(count)), s("C"))


def repeat(op, n):
    return op * n


def deep_dicts(depth, key_size=200):
    key = s("k" * key_size)
    return (pickle.EMPTY_DICT + key) * depth + pickle.EMPTY_DICT + pickle.SETITEM * depth


def deep_lists(depth):
    return pickle.EMPTY_LIST * (depth + 1) + pickle.APPEND * depth


def reproducers(scale=1):
    """``{name: pickle stream}``, one per attack; ``scale`` < 1 shrinks the
    ones whose cost is their size (the full-size ones run in a subprocess)."""
    big = max(1, int(10_000_000 * scale))
    return {
        # Forged object pointers: an object array over file bytes.
        "object-array-over-bytes": proto(2, call(glob("numpy", "ndarray"), tup(integer(1)),
                                                 dtype("O"), binbytes(b"A" * 8))),
        "object-array-via-numpy-core": proto(2, call(glob("numpy.core.multiarray", "ndarray"),
                                                     tup(integer(1)), s("O"),
                                                     binbytes(b"A" * 8))),
        # A field at 1 MiB in an 8-byte item: reads the heap.
        "dtype-field-outside-item": proto(2, frombuffer(b"A" * 8, dtype_state(
            "V8", fields_state("a", dtype("f8"), 1 << 20, 8, 16)), 1)),
        # An object field, with flags saying the dtype holds no object.
        "dtype-object-flags-lie": proto(2, frombuffer(b"A" * 8, dtype_state(
            "V8", fields_state("a", dtype("O"), 0, 8, 0)), 1)),
        "void-object-over-bytes": proto(4, glob("numpy", "void") + tup(binbytes(b"A" * 8))
                                        + pickle.EMPTY_DICT + s("dtype")
                                        + pickle.EMPTY_LIST + tup(s("a"), s("O"))
                                        + pickle.APPEND + pickle.SETITEM + pickle.NEWOBJ_EX),
        "reconstruct-object-state": proto(2, call(
            glob("numpy._core.multiarray", "_reconstruct"), glob("numpy", "ndarray"),
            tup(integer(0)), binbytes(b"b")) + tup(integer(1), tup(integer(1)), dtype_state(
                "V8", fields_state("a", dtype("O"), 0, 8, 0)), pickle.NEWFALSE,
            binbytes(b"A" * 8)) + pickle.BUILD),
        "builtin-dtype-state": proto(2, call(glob("numpy", "dtype"), s("f8"), pickle.NEWFALSE,
                                             pickle.NEWFALSE)
                                     + tup(integer(3), s(">"), pickle.NONE, pickle.NONE,
                                           pickle.NONE, integer(-1), integer(-1), integer(0))
                                     + pickle.BUILD),
        "recarray-object-over-bytes": proto(2, call(
            glob("numpy", "recarray"), tup(integer(1)), pickle.NONE, binbytes(b"A" * 8),
            integer(0), pickle.NONE, s("O"))),
        # Lasting changes to the process.
        "build-on-function": proto(2, glob("cpersist.pickler", "inline_array")
                                   + tup(pickle.NONE, pickle.EMPTY_DICT + s("__qualname__")
                                         + s("x") + pickle.SETITEM) + pickle.BUILD),
        "build-on-class": proto(2, glob("fractions", "Fraction")
                                + tup(pickle.NONE, pickle.EMPTY_DICT + s("__module__")
                                      + s("x") + pickle.SETITEM) + pickle.BUILD),
        "build-on-masked-singleton": proto(2, call(glob("numpy.ma.core", "MaskedConstant"))
                                           + tup(integer(1)) + pickle.BUILD),
        "setitem-on-class": proto(2, glob("collections", "OrderedDict") + s("x") + s("y")
                                  + pickle.SETITEM),
        # An INT in hex hid a following EXT from the old pre-scan.
        "hex-int-then-extension": proto(2, b"I0x10\n" + pickle.POP + pickle.EXT1 + b"\xf0"
                                        + tup(s("true")) + pickle.REDUCE),
        # Resource bombs.
        "memo-index-2**28": proto(4, pickle.NONE + pickle.LONG_BINPUT
                                  + struct.pack("<I", 2**28)),
        "empty-sets": proto(4, pickle.MARK + repeat(pickle.EMPTY_SET, big) + pickle.POP_MARK
                            + pickle.NONE),
        "empty-dicts": proto(4, pickle.MARK + repeat(pickle.EMPTY_DICT, big)
                             + pickle.POP_MARK + pickle.NONE),
        "dups": proto(4, pickle.NONE + repeat(pickle.DUP, 2 * big)),
        "fraction-1e10000000": proto(2, call(glob("fractions", "Fraction"), s("1e10000000"))),
        "int-of-decimal": proto(2, call(glob("builtins", "int"), call(
            glob("decimal", "Decimal"), s("1e100000000")))),
        "bytes-10**10": proto(2, call(glob("builtins", "bytes"), integer(10**10))),
        "list-of-range": proto(2, call(glob("builtins", "list"), call(
            glob("builtins", "range"), integer(10**12)))),
        "int-of-long-text": proto(2, call(glob("builtins", "int"), s("9" * 100_000))),
        "long-text": proto(0, b"L" + b"9" * 100_000 + b"L\n"),
        "huge-shape": proto(2, call(glob("numpy", "ndarray"), tup(integer(2**40)), s("u1"))),
        "matrix-of-nested-range": proto(2, call(glob("numpy", "matrix"), pickle.EMPTY_LIST + call(
            glob("builtins", "range"), integer(2**32)) + pickle.APPEND)),
        "void-of-huge-dtype": proto(2, call(glob("numpy", "void"), binbytes(b"x"),
                                            dtype("V2000000000"))),
        "deep-dicts": proto(4, deep_dicts(max(1, int(60_000 * scale)))),
        "deep-lists": proto(4, deep_lists(max(1, int(1_000_000 * scale)))),
    }


#: Pieces the generator strings together: literals in odd forms, containers,
#: allowlisted callables, and the opcodes of the attacks above.
_PIECES = [
    b"I0x10\n", b"I010\n", b"I 7\n", b"I01\n", b"I-0x1f\n", b"I1_000\n", b"I99999999999999999999\n",
    b"L0x1fL\n", b"L12\n", b"F1e400\n", b"Finf\n", b"F1.5\n", b"S'a'\n", b"S'\\x4'\n",
    b"Vabc\n", b"g0\n", b"p0\n", b"p-1\n", pickle.MARK, pickle.POP, pickle.POP_MARK,
    pickle.DUP, pickle.TUPLE, pickle.TUPLE1, pickle.TUPLE2, pickle.LIST, pickle.DICT,
    pickle.EMPTY_DICT, pickle.EMPTY_LIST, pickle.EMPTY_SET, pickle.EMPTY_TUPLE,
    pickle.APPEND, pickle.APPENDS, pickle.SETITEM, pickle.SETITEMS, pickle.ADDITEMS,
    pickle.FROZENSET, pickle.BUILD, pickle.REDUCE, pickle.NEWOBJ, pickle.MEMOIZE,
    pickle.NONE, pickle.NEWTRUE, pickle.NEXT_BUFFER, pickle.READONLY_BUFFER, b"h\x00",
    b"q\x01", b"\x82\xf0", b"\x8a\x02\xff\x7f",
    b"T\xff\xff\xff\xff", b"\x8b\xfe\xff\xff\xff", b"\x8c\x02\xed\xa0", b"U\x01\xff",
    s("O"), s("f8"), s("V8"), s("1e999999"), binbytes(b"A" * 8), integer(2**40),
    glob("numpy", "ndarray"), glob("numpy", "dtype"), glob("numpy", "void"),
    glob("numpy._core.multiarray", "_reconstruct"), glob("numpy._core.multiarray", "scalar"),
    glob("numpy._core.numeric", "_frombuffer"), glob("builtins", "bytes"),
    glob("builtins", "range"), glob("builtins", "list"), glob("fractions", "Fraction"),
    glob("decimal", "Decimal"), glob("copyreg", "_reconstructor"),
    glob("collections", "OrderedDict"), glob("builtins", "set"),
    dtype("O"), dtype("f8"), dtype("V8"), tup(integer(1)),
]


def generate(rng, count):
    """``count`` hostile streams: pieces strung together, and reproducers
    cut, spliced and mutated."""
    known = list(reproducers(scale=0.0001).values())
    for _ in range(count):
        kind = rng.random()
        if kind < 0.5:
            body = b"".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 30)))
            stream = pickle.PROTO + bytes([rng.choice((2, 4, 5))]) + body + pickle.STOP
        else:
            stream = bytearray(rng.choice(known))
            for _ in range(rng.randint(1, 4)):
                action = rng.random()
                at = rng.randrange(len(stream) + 1)
                if action < 0.4 and stream:
                    stream[min(at, len(stream) - 1)] = rng.randrange(256)
                elif action < 0.7:
                    stream[at:at] = rng.choice(_PIECES)
                else:
                    del stream[at:at + rng.randint(1, 8)]
            stream = bytes(stream)
        yield stream


def _peak_rss_mb():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


READERS = ("load", "loads", "open-load", "load-trusted", "inspect", "verify", "arrays", "convert")


def read_with(reader, path, limits=None):
    """Read the file ``path`` as ``reader`` (one of :data:`READERS`)."""
    import cpersist

    if reader == "load":
        return cpersist.load(path, trusted=False, limits=limits)
    if reader == "loads":
        with open(path, "rb") as file:
            return cpersist.loads(file.read(), trusted=False, limits=limits)
    if reader == "open-load":
        with cpersist.open(path, trusted=False, limits=limits) as handle:
            return handle.load()
    if reader == "load-trusted":
        return cpersist.load(path)
    if reader == "inspect":
        return cpersist.inspect(path, limits=limits)
    if reader == "verify":
        return cpersist.verify(path, limits=limits)
    if reader == "convert":  # re-encodes the arrays, walks the stream for bfloat16 storages
        return cpersist.convert(path, f"{path}.converted.cp", compress=3)
    with cpersist.open(path, limits=limits) as handle:
        return handle.arrays


def main(argv):
    """``python -m tests._hostile MEMORY_MB READERS LIMITS PATH...``: one
    JSON line per path and reader; LIMITS is a JSON dict of
    :class:`cpersist.Limits` fields (``{}``: the defaults)."""
    import resource
    import time

    memory = int(argv[0]) << 20
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    import cpersist

    limits = json.loads(argv[2])
    for path in argv[3:]:
        for reader in argv[1].split(","):
            start = time.perf_counter()
            try:
                read_with(reader, path, limits)
                outcome = None
            except cpersist.CpersistError as exc:
                outcome = type(exc).__name__
            except Exception as exc:  # what the test reports as a failure
                outcome = f"BARE {type(exc).__name__}: {str(exc)[:200]}"
            print(json.dumps({"path": path, "reader": reader, "outcome": outcome,
                              "seconds": round(time.perf_counter() - start, 3),
                              "rss_mb": _peak_rss_mb()}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
