#!/usr/bin/env python3
"""The restricted load against the trusted one, on benign objects.

Run from the repository root::

    python -m benchmarks.differential_restricted            # the full run
    python -m benchmarks.differential_restricted --every 25 # one object in 25

Every object of :func:`benign_objects` (numpy arrays of every builtin dtype
in many layouts, masked and record arrays, numpy scalars and dtypes, plain
Python values and containers, torch tensors and their views, ml_dtypes and
JAX arrays, each family where its library is installed) is written in
several ways (:func:`encodings`): dumped by cpersist at several ``compress``
settings, and pickled by :mod:`pickle` at protocols 0-5, that stream put in
a cpersist container as its pickle stream (numpy's own pickles, as a
restricted load meets them inside a file); at protocol 5 also with its
buffers out of band, the stream given to the C unpickler and to the
restricted machine with the same buffers. Each file is loaded with
``trusted=True`` and with ``trusted=False``; the two results must be the
same (:func:`first_difference`: types, dtypes, shapes, strides, the
writeable and contiguity flags, every byte, masks and fill values, tensors'
dtype, shape, stride, offset, ``requires_grad``, and which arrays and
tensors share memory). Each cpersist dump's dry run
(``cpersist.verify(...)["restricted_load"]``) must say it is accepted.

Torch tensors and JAX arrays are not pickled raw: their own pickles call
torch's and jax's rebuild functions (``torch.storage._load_from_bytes``
runs ``torch.load``), which no restricted load resolves; cpersist stores
them as sections.

Prints the counts (objects, loads compared, identical, differing, refused)
and each difference or refusal; exits 1 if there is any.
"""

import argparse
import collections
import datetime
import decimal
import fractions
import io
import math
import pickle
import sys
import time
import uuid
import warnings

import numpy as np

#: ``compress`` settings every object is dumped with (those available): raw,
#: Zstandard, LZ4, and Blosc's shuffle before LZ4.
COMPRESS = (0, 3, "lz4", "blosc:lz4")
#: One object in this many is also dumped with ``compress="max"`` (which
#: stores Fortran-ordered arrays in C order and names numpy.asfortranarray),
#: the slowest setting to write.
MAX_EVERY = 10
#: Protocols of the raw pickles.
PROTOCOLS = tuple(range(pickle.HIGHEST_PROTOCOL + 1))
#: Elements of the arrays of each size: a compressed dump keeps arrays under
#: 64 KiB inline in its stream, a raw one stores any in a section of its own.
SIZES = {"small": 24, "large": 3000, "huge": 12000}
LARGE = SIZES["large"]


# -- the objects --------------------------------------------------------------------

def _numeric_dtypes():
    names = ["?", "i1", "u1"]
    for kind in ("i", "u"):
        names += [f"{e}{kind}{n}" for n in (2, 4, 8) for e in "<>"]
    names += [f"{e}f{n}" for n in (2, 4, 8) for e in "<>"]
    names += [f"{e}c{n}" for n in (8, 16) for e in "<>"]
    names += ["g", "G", "p", "P", "l", "L", "q", "Q", "e", "d"]
    return [np.dtype(n) for n in names]


_UNITS = ("Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as")


def _time_dtypes():
    out = [np.dtype("M8"), np.dtype("m8")]
    for unit in _UNITS:
        out += [np.dtype(f"<M8[{unit}]"), np.dtype(f"<m8[{unit}]")]
    out += [np.dtype(">M8[s]"), np.dtype(">m8[ns]"), np.dtype("M8[10ms]"),
            np.dtype("m8[25us]")]
    return out


def _text_dtypes():
    return [np.dtype(n) for n in ("S1", "S7", "<U1", "<U5", ">U3", "V3", "V8")]


def _structured_dtypes():
    nested = np.dtype([("a", "<i4"), ("b", [("c", ">f8", (2,)), ("d", "S3")])])
    return [
        np.dtype([("x", "<i4"), ("y", ">f8")]),
        np.dtype([("x", "u1"), ("y", "<i8")], align=True),
        nested,
        np.dtype([("n", nested), ("m", "?")], align=True),
        np.dtype({"names": ["a", "b"], "formats": ["<i2", "<f4"], "offsets": [0, 8],
                  "itemsize": 16}),
        np.dtype([(("title", "t"), "<i4"), ("u", "U2")]),
        np.dtype([("sub", "<i2", (2, 3))]),
        np.dtype([("when", "<M8[ms]"), ("span", ">m8[s]"), ("c", "<c8")]),
        np.dtype("f8", metadata={"unit": "m"}),
    ]


def _values(dtype, count, seed):
    """``count`` items of ``dtype``, varied and deterministic."""
    rng = np.random.default_rng(seed)
    if dtype.kind == "b":
        return rng.integers(0, 2, count).astype(dtype)
    if dtype.kind == "U":
        letters = np.array(list("abcxyzé€😀 _"))
        n = dtype.itemsize // 4
        return np.array(["".join(rng.choice(letters, rng.integers(0, n + 1)))
                         for _ in range(count)], dtype=dtype)
    if dtype.kind == "f" or dtype.kind == "c":
        out = (rng.standard_normal(count) * 1000).astype(dtype)
        specials = [np.nan, np.inf, -np.inf, -0.0]
        out[:min(4, count)] = specials[:min(4, count)]
        return out
    if dtype.kind == "M" or dtype.kind == "m":
        out = rng.integers(-10**6, 10**6, count).astype(dtype.newbyteorder("="))
        if count:
            out[0] = np.datetime64("NaT") if dtype.kind == "M" else np.timedelta64("NaT")
        return out.astype(dtype)
    raw = rng.integers(0, 256, count * dtype.itemsize, dtype=np.uint8).tobytes()
    out = np.frombuffer(raw, dtype=dtype, count=count).copy()
    if dtype.names is not None or dtype.kind == "V":
        return out
    return out


def _layouts(dtype, seed, n):
    """``(label, array)`` of ``n`` items of ``dtype`` in many layouts."""
    base = _values(dtype, n, seed)
    rows = n // 6
    c = base.reshape(rows, 6)
    yield "C", c
    yield "F", np.asfortranarray(c)
    yield "F-view", np.asfortranarray(c)[1:, ::2]
    yield "rows-reversed-columns-stepped", c[::-1, ::-2]
    yield "column", c[:, 2]
    yield "T", c.T
    yield "step", base[::3]
    yield "reversed", base[::-1]
    yield "block", c[1:, 1:5]
    yield "3d-view", base[: rows * 6].reshape(rows // 2, 2, 6)[:, ::-1, ::2]
    yield "0-d", base[:1].reshape(())
    yield "empty", base[:0].reshape(0, 3)
    yield "broadcast", np.broadcast_to(base[:6], (3, 6))
    yield "broadcast-column", np.broadcast_to(base[:4, None], (4, 6))
    yield "diagonal", np.diagonal(c)  # a read-only view
    ro = c.copy()
    ro.flags.writeable = False
    yield "read-only", ro


def _object_arrays():
    items = [1, -2**70, 2.5, "text", b"bytes", None, True, (1, "a"), [1, [2]], {"k": 3},
             1 + 2j, frozenset({1, 2}), decimal.Decimal("1.1"), datetime.date(2020, 5, 17)]
    flat = np.empty(len(items), dtype=object)
    flat[:] = items
    yield "object-flat", flat
    yield "object-2d", flat[:12].reshape(3, 4)
    yield "object-F", np.asfortranarray(flat[:12].reshape(3, 4))
    yield "object-view", flat[::2]
    yield "object-0d", np.array(None, dtype=object)
    yield "object-empty", np.empty((0, 2), dtype=object)
    nested = np.empty(2, dtype=object)
    nested[0] = np.arange(3)
    nested[1] = "x"
    yield "object-holding-array", nested
    yield "object-struct", np.array([(1, "a"), (2, None)], dtype=[("n", "i4"), ("o", "O")])


def _string_dtype_arrays():
    StringDType = getattr(np.dtypes, "StringDType", None)
    if StringDType is None:
        return
    words = ["", "a", "long string " * 5, "é€😀", "x"]
    yield "stringdtype", np.array(words, dtype=StringDType())
    yield "stringdtype-2d", np.array(words[:4], dtype=StringDType()).reshape(2, 2)
    yield "stringdtype-na", np.array(["a", None, "b"], dtype=StringDType(na_object=None))
    yield "stringdtype-na-nan", np.array(["a", np.nan], dtype=StringDType(na_object=np.nan))
    yield "stringdtype-nocoerce", np.array(["a", "b"], dtype=StringDType(coerce=False))
    yield "stringdtype-view", np.array(words * 3, dtype=StringDType())[::2]


def _masked(seed):
    ma = np.ma
    for dtype in ("<f8", ">i4", "?", "<c8", "M8[s]", "U3", "S2"):
        data = _values(np.dtype(dtype), 12, seed)
        mask = np.arange(12) % 3 == 0
        yield f"masked-{dtype}", ma.masked_array(data, mask=mask)
        yield f"masked-{dtype}-2d-F", ma.masked_array(np.asfortranarray(data.reshape(3, 4)),
                                                      mask=np.asfortranarray(mask.reshape(3, 4)))
    yield "masked-fill", ma.masked_array([1.0, 2.0, 3.0], mask=[0, 1, 0], fill_value=-7.5)
    yield "masked-nomask", ma.masked_array(np.arange(5))
    yield "masked-hard", ma.masked_array(np.arange(5), mask=[1, 0, 0, 1, 0], hard_mask=True)
    yield "masked-struct", ma.masked_array(np.zeros(3, dtype=[("a", "i4"), ("b", "f8")]),
                                           mask=[(0, 1), (1, 0), (0, 0)])
    yield "masked-0d", ma.masked_array(3.0, mask=True)
    yield "masked-empty", ma.masked_array(np.zeros((0, 2)))
    yield "masked-view", ma.masked_array(np.arange(20.0), mask=np.arange(20) % 2)[::3]
    yield "masked-large", ma.masked_array(np.arange(float(LARGE)), mask=np.arange(LARGE) % 7 == 0)
    yield "masked-constant", ma.masked
    yield "masked-in-dict", {"m": ma.masked_array([1, 2], mask=[0, 1]), "c": ma.masked}


def _records(seed):
    recs = np.rec.fromrecords([(1, 2.5, b"ab"), (3, -1.0, b"c")], names="a,b,c")
    yield "recarray", recs
    yield "recarray-view", recs[::-1]
    yield "recarray-field", recs.b
    yield "record", recs[0]
    big = np.rec.fromarrays([np.arange(LARGE), _values(np.dtype(">f4"), LARGE, seed)],
                            names="i,v")
    yield "recarray-large", big
    yield "recarray-aligned", np.rec.array(np.zeros(4, dtype=np.dtype(
        [("x", "u1"), ("y", "<f8")], align=True)))
    yield "matrix", np.matrix([[1, 2], [3, 4]])
    yield "matrix-F", np.matrix(np.asfortranarray(np.arange(6.0).reshape(2, 3)))


def _scalars(dtypes, seed):
    for dtype in dtypes:
        values = _values(dtype, 3, seed)
        yield f"scalar-{dtype.char}{dtype.str}-{dtype.descr!s:.40}", values[1]
        yield f"scalar-array-{dtype.char}{dtype.str}-{dtype.descr!s:.40}", np.array(values[1])
    yield "scalar-str_", np.str_("héllo")
    yield "scalar-bytes_", np.bytes_(b"ab\x00c")
    yield "scalar-void", np.void(b"\x01\x02\x03")
    yield "scalar-record", np.zeros(1, dtype=[("a", "i4"), ("b", "f4")])[0]
    yield "scalar-longdouble", np.longdouble("1.2345678901234567890123")


def _dtype_values(dtypes):
    for dtype in dtypes:
        yield f"dtype-{dtype.char}{dtype.str}-{dtype.descr!s:.40}-{dtype.metadata}", dtype
    yield "dtype-types", [np.float32, np.int64, np.bool_, np.complex128, np.str_, np.void,
                          np.datetime64, np.ndarray]
    yield "dtype-classes", [type(np.dtype("f8")), type(np.dtype("U3")), type(np.dtype("M8[s]"))]


def _python_values(seed):
    rng = np.random.default_rng(seed)
    floats = [0.0, -0.0, 1e-310, 1.5, float("inf"), float("-inf"), float("nan"), 1e308]
    ints = [0, 1, -1, 255, 256, 2**31, -2**31 - 1, 2**63, -2**64, 2**200, -(10**50)]
    texts = ["", "a", "é€😀", "\x00", "x" * 300, "\ud800".encode("utf-8",
                                                              "surrogatepass").decode(
        "utf-8", "surrogatepass")]
    blobs = [b"", b"\x00\xff", bytes(range(256)), b"x" * 70000]
    scalars = [None, True, False, Ellipsis, NotImplemented, *floats, *ints, *texts, *blobs,
               1 + 2j, complex(float("nan"), -0.0), bytearray(b"ba"), bytearray(),
               range(3, 100, 7), range(0), slice(1, None, 2), slice(None),
               decimal.Decimal("-1.25E+7"), decimal.Decimal("NaN"), decimal.Decimal("-0"),
               fractions.Fraction(-3, 7), uuid.UUID(int=2**127 + 5),
               datetime.date(1, 1, 1), datetime.datetime(2024, 2, 29, 23, 59, 59, 999999),
               datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone(
                   datetime.timedelta(hours=-5, minutes=-30), "X")),
               datetime.time(12, 30, tzinfo=datetime.timezone.utc),
               datetime.timedelta(days=-3, microseconds=7), datetime.timezone.utc]
    for i, value in enumerate(scalars):
        yield f"py-scalar-{i}-{type(value).__name__}", value
    yield "py-types", [int, float, str, bytes, bool, complex, list, dict, tuple, set,
                       frozenset, bytearray]
    shared = [1, 2]
    yield "py-shared", {"a": shared, "b": shared, "t": (shared, shared)}
    recursive = []
    recursive.append(recursive)
    yield "py-recursive-list", recursive
    rdict = {}
    rdict["self"] = rdict
    yield "py-recursive-dict", rdict
    yield "py-ordered", collections.OrderedDict([("z", 1), ("a", [2]), (3, None)])
    yield "py-counter", collections.Counter("mississippi")
    dd = collections.defaultdict(list)
    dd["x"].append(1)
    yield "py-defaultdict", dd
    yield "py-deque", collections.deque([1, "a", None], maxlen=5)
    yield "py-deque-nomax", collections.deque(range(10))
    yield "py-sets", [set(), {1, "a", (2, 3)}, frozenset(), frozenset({b"x", 2.5})]
    yield "py-keys", {1: "int", 2.5: "float", (1, 2): "tuple", None: "none", b"b": "bytes",
                      frozenset({1}): "fs", True: "bool", -2**70: "big"}
    yield "py-nested", {"l": [[[[[]]]]], "t": ((((),),),), "d": {"a": {"b": {"c": {}}}}}
    for n in range(200):
        size = int(rng.integers(1, 40))
        yield f"py-mixed-{n}", {f"k{i}": [int(rng.integers(-1000, 1000)), float(rng.random()),
                                          str(rng.integers(10**6)), (i, None),
                                          {"n": bytes(rng.integers(0, 256, 3, dtype=np.uint8))}]
                                for i in range(size)}
    yield "py-long-list", list(range(5000))
    yield "py-big-dict", {str(i): i * 1.5 for i in range(3000)}


def _containers_of_arrays(seed):
    a = _values(np.dtype("<f8"), 600, seed).reshape(20, 30)
    yield "arrays-shared", {"a": a, "again": a, "view": a[2:, ::3], "T": a.T}
    yield "arrays-list", [a, a[0], np.arange(4), "tag", {"nested": [a[::-1]]}]
    yield "arrays-tuple-keys", {(1, "w"): np.ones(3), (2, "b"): np.zeros((2, 2), ">i2")}
    yield "arrays-state", {"epoch": 3, "lr": 1e-3, "weights": [np.full((8, 8), float(i))
                                                               for i in range(10)]}
    yield "arrays-many-small", {f"p{i}": np.arange(i, dtype="i2") for i in range(60)}
    yield "arrays-with-scalars", [np.float32(1.5), np.int8(-3), a[0, :4], np.bool_(True)]


def _ml_dtypes_arrays(seed):
    try:
        import ml_dtypes
    except ImportError:
        return
    names = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
             "float8_e4m3b11fnuz", "float8_e4m3", "float8_e3m4", "float8_e8m0fnu",
             "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "int2", "uint2", "int4",
             "uint4"]
    for name in names:
        kind = getattr(ml_dtypes, name, None)
        if kind is None:
            continue
        dtype = np.dtype(kind)
        for size, n in SIZES.items():
            src = _values(np.dtype("f4"), n, seed)
            if "int" in name:
                src = np.round(np.clip(src, -1, 1))
            base = np.nan_to_num(src, nan=0.0, posinf=1.0, neginf=-1.0).astype(dtype)
            c = base.reshape(-1, 6)
            for label, arr in (("C", c), ("F", np.asfortranarray(c)), ("step", base[::3]),
                               ("0-d", base[:1].reshape(())), ("T", c.T)):
                yield f"ml-{name}-{label}-{size}", arr
        yield f"ml-{name}-scalar", base[1]


def _torch_objects(seed):
    try:
        import torch
    except ImportError:
        return
    dtypes = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.uint16, torch.uint32, torch.uint64, torch.float16, torch.bfloat16,
              torch.float32, torch.float64, torch.complex32, torch.complex64,
              torch.complex128]
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                 "float8_e8m0fnu"):
        if hasattr(torch, name):
            dtypes.append(getattr(torch, name))
    gen = torch.Generator().manual_seed(seed)
    for dtype in dtypes:
        for size, n in SIZES.items():
            raw = torch.randint(0, 256, (n * dtype.itemsize,), dtype=torch.uint8, generator=gen)
            if dtype is torch.bool:
                base = raw[:n] % 2 == 1
            else:
                base = raw.view(dtype)
            m = base.reshape(-1, 6)
            views = {"C": m, "T": m.t(), "slice": m[1:, ::2], "step": base[::3],
                     "0-d": base[0], "empty": base[:0].reshape(0, 3),
                     "expand": base[:6].expand(4, 6), "narrow": base.narrow(0, 2, 6),
                     "permute": base[:24].reshape(2, 3, 4).permute(2, 0, 1)}
            if dtype.is_floating_point or dtype.is_complex:
                if dtype not in (torch.complex32,) and "float8" not in str(dtype):
                    views["requires_grad"] = m.clone().requires_grad_(True)
                    views["parameter"] = torch.nn.Parameter(m.clone())
                    views["parameter-frozen"] = torch.nn.Parameter(m.clone(),
                                                                   requires_grad=False)
            for label, t in views.items():
                yield f"torch-{str(dtype)[6:]}-{label}-{size}", t
            yield f"torch-{str(dtype)[6:]}-shared-{size}", {"w": m, "T": m.t(), "row": m[1],
                                                            "again": m}
    yield "torch-values", {"size": torch.Size([2, 3]), "empty-size": torch.Size([]),
                           "dtypes": [torch.float32, torch.bfloat16, torch.int64, torch.bool,
                                      torch.complex64, torch.uint8],
                           "devices": [torch.device("cpu"), torch.device("cpu", 0),
                                       torch.device("meta"), torch.device("cuda", 1)]}
    state = collections.OrderedDict(
        (f"layer{i}.{kind}", torch.randn(8, 8, generator=gen) if kind == "weight"
         else torch.zeros(8)) for i in range(6) for kind in ("weight", "bias"))
    yield "torch-state-dict", {"model": state, "step": 100, "shape": torch.Size([8, 8]),
                               "dtype": torch.float32}
    yield "torch-mixed", {"t": torch.arange(6.0), "a": np.arange(6.0), "s": torch.tensor(3)}


def _jax_objects(seed):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return
    jax.config.update("jax_enable_x64", True)
    for dtype in ("bool", "int8", "uint8", "int16", "int32", "int64", "uint32", "float16",
                  "bfloat16", "float32", "float64", "complex64", "complex128"):
        for large in (False, True):
            src = _values(np.dtype("f4"), LARGE if large else 24, seed)
            host = np.nan_to_num(src).astype(jnp.dtype(dtype))
            arr = jnp.asarray(host.reshape(-1, 6))
            size = "large" if large else "small"
            yield f"jax-{dtype}-{size}", arr
            yield f"jax-{dtype}-T-{size}", arr.T
            yield f"jax-{dtype}-0d-{size}", arr[0, 0]
    yield "jax-tree", {"params": {"w": jnp.ones((4, 4)), "b": jnp.zeros(4)},
                       "step": jnp.asarray(7), "host": np.arange(3)}


def benign_objects(seed=0):
    """``(name, object, family)`` of every benign object of the run."""
    numeric = _numeric_dtypes()
    times = _time_dtypes()
    texts = _text_dtypes()
    structured = _structured_dtypes()
    unique = {}
    for dtype in numeric + times + texts + structured:  # 'i8', 'l' and 'q' stay apart
        unique.setdefault((dtype.char, dtype.str, repr(dtype), repr(dtype.metadata)), dtype)
    all_dtypes = list(unique.values())
    for dtype in all_dtypes:
        for size, n in SIZES.items():
            for label, arr in _layouts(dtype, seed, n):
                yield (f"np-{dtype.char}{dtype.str}-{dtype.descr!s:.40}"
                       f"{'-metadata' if dtype.metadata else ''}-{label}-{size}", arr, "numpy")
    for group in (_object_arrays(), _string_dtype_arrays(), _masked(seed), _records(seed),
                  _scalars(all_dtypes, seed), _dtype_values(all_dtypes),
                  _containers_of_arrays(seed)):
        for name, obj in group:
            yield name, obj, "numpy"
    for name, obj in _ml_dtypes_arrays(seed):
        yield name, obj, "ml_dtypes"
    for name, obj in _python_values(seed):
        yield name, obj, "python"
    for name, obj in _torch_objects(seed):
        yield name, obj, "torch"
    for name, obj in _jax_objects(seed):
        yield name, obj, "jax"


# -- the files --------------------------------------------------------------------------

def _in_container(stream):
    from tests._forge import container_bytes

    return container_bytes(stream)


def encodings(obj, family, compress=COMPRESS, protocols=PROTOCOLS):
    """``(label, file bytes, is a cpersist dump)`` of ``obj``: cpersist dumps
    at each ``compress`` setting, and raw pickles at each protocol put in a
    container (not for torch and JAX objects: see the module's docstring).
    A protocol that cannot pickle ``obj`` is left out."""
    import cpersist

    available = set(cpersist.available_codecs())
    for level in compress:
        if type(level) is str and level not in available:
            continue
        yield f"dump-{level}", cpersist.dumps(obj, compress=level, n_threads=1), True
    if family in ("torch", "jax"):
        return
    for protocol in protocols:
        try:
            stream = pickle.dumps(obj, protocol=protocol)
        except (pickle.PicklingError, TypeError, ValueError, AttributeError):
            continue  # StringDType arrays below protocol 2, for one
        yield f"pickle-{protocol}", _in_container(stream), False
    if 5 in protocols:
        raws = []
        try:
            stream = pickle.dumps(obj, protocol=5,
                                  buffer_callback=lambda b: raws.append(b.raw().tobytes()))
        except (pickle.PicklingError, TypeError, ValueError, AttributeError, BufferError):
            return
        if raws:  # numpy's arrays over out-of-band buffers
            yield "pickle-5-buffers", (stream, raws), False


def _load(data, trusted):
    """A file's bytes loaded, or a stream and its out-of-band buffers'
    bytes: given to the C unpickler or run on the restricted machine, each
    with the buffers in fresh writable memory."""
    if type(data) is not tuple:
        import cpersist

        return cpersist.loads(data, trusted=trusted)
    stream, raws = data
    buffers = [memoryview(bytearray(raw)) for raw in raws]
    if trusted:
        return pickle.loads(stream, buffers=buffers)
    from cpersist.pickling import restricted
    from cpersist.pickling.unpickler import ArrayUnpickler

    unpickler = ArrayUnpickler(io.BytesIO(stream), None, restricted=True, source="<buffers>")
    return restricted.run(stream, unpickler.resolve, unpickler.persistent_load,
                          unpickler._limits, "<buffers>", on_protocol=unpickler._set_protocol,
                          buffers=buffers)


# -- the comparison -----------------------------------------------------------------------

def _is_torch(obj):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _is_jax(obj):
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(obj, jax.Array)


def _dtype_facts(d):
    return (type(d), d.str, d.descr, d.names, d.fields and {k: v[1:] for k, v in d.fields.items()},
            d.metadata, d.isalignedstruct, d.itemsize, d.alignment, d.flags, d.shape,
            repr(getattr(d, "na_object", "-")), getattr(d, "coerce", "-"), repr(d))


def _array_facts(a):
    return (type(a), a.shape, a.strides, a.flags.writeable, a.flags.c_contiguous,
            a.flags.f_contiguous, a.flags.aligned)


def _array_bytes(a):
    return a.tobytes(order="A") if not a.dtype.hasobject else None


def _float_key(x):
    return (x.hex() if not math.isnan(x) else "nan", math.copysign(1, x))


class Comparison:
    """Walks two results side by side (:func:`first_difference`)."""

    def __init__(self):
        self.seen = {}        # id of a left object -> its right one
        self.memory = []      # (left, right) arrays and tensors, for sharing

    def differ(self, a, b, where):
        if type(a) is not type(b):
            return f"{where}: type {type(a).__name__} != {type(b).__name__}"
        kind = type(a)
        if kind in (list, dict, set, bytearray, collections.OrderedDict, collections.deque,
                    collections.defaultdict, collections.Counter) or isinstance(
                a, np.ndarray) or _is_torch(a):
            known = self.seen.get(id(a))
            if known is not None:
                return None if known[1] is b else f"{where}: sharing differs"
            self.seen[id(a)] = (a, b)
        if kind is float:
            return None if _float_key(a) == _float_key(b) else f"{where}: {a!r} != {b!r}"
        if kind is complex:
            return None if (_float_key(a.real), _float_key(a.imag)) == (
                _float_key(b.real), _float_key(b.imag)) else f"{where}: {a!r} != {b!r}"
        if kind is decimal.Decimal:
            return None if str(a) == str(b) else f"{where}: {a!r} != {b!r}"
        if kind in (list, tuple, collections.deque):
            if len(a) != len(b):
                return f"{where}: length {len(a)} != {len(b)}"
            if kind is collections.deque and a.maxlen != b.maxlen:
                return f"{where}: maxlen differs"
            for i, (x, y) in enumerate(zip(a, b)):
                found = self.differ(x, y, f"{where}[{i}]")
                if found:
                    return found
            return None
        if isinstance(a, dict):
            if list(map(repr, a)) != list(map(repr, b)):
                return f"{where}: keys {list(a)[:5]} != {list(b)[:5]}"
            if kind is collections.defaultdict and a.default_factory is not b.default_factory:
                return f"{where}: default_factory differs"
            for (k, x), y in zip(a.items(), b.values()):
                found = self.differ(x, y, f"{where}[{k!r}]")
                if found:
                    return found
            return None
        if kind in (set, frozenset):
            return None if a == b and sorted(map(repr, a)) == sorted(map(repr, b)) else (
                f"{where}: {a!r:.80} != {b!r:.80}")
        if isinstance(a, np.ndarray):
            return self._arrays(a, b, where)
        if isinstance(a, np.dtype):
            return None if _dtype_facts(a) == _dtype_facts(b) else (
                f"{where}: dtype {_dtype_facts(a)} != {_dtype_facts(b)}")
        if isinstance(a, np.generic):
            if a.dtype != b.dtype or _dtype_facts(a.dtype) != _dtype_facts(b.dtype):
                return f"{where}: scalar dtype {a.dtype} != {b.dtype}"
            same = a.tobytes() == b.tobytes() if not a.dtype.hasobject else a == b
            return None if same else f"{where}: scalar {a!r} != {b!r}"
        if _is_torch(a):
            return self._tensors(a, b, where)
        if _is_jax(a):
            return self._jax(a, b, where)
        try:
            same = a == b
            same = bool(same)
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            return f"{where}: cannot compare {kind.__name__}: {exc}"
        if not same or repr(a) != repr(b):
            return f"{where}: {a!r:.80} != {b!r:.80}"
        return None

    def _arrays(self, a, b, where):
        self.memory.append((a, b))
        if _dtype_facts(a.dtype) != _dtype_facts(b.dtype):
            return f"{where}: dtype {_dtype_facts(a.dtype)} != {_dtype_facts(b.dtype)}"
        if _array_facts(a) != _array_facts(b):
            return f"{where}: layout {_array_facts(a)} != {_array_facts(b)}"
        ma = np.ma
        if isinstance(a, ma.MaskedArray):
            if (a.mask is ma.nomask) != (b.mask is ma.nomask):
                return f"{where}: nomask on one side only"
            found = self._arrays(np.ma.getmaskarray(a).view(np.ndarray),
                                 np.ma.getmaskarray(b).view(np.ndarray), f"{where}.mask")
            if found:
                return found
            # Not .fill_value, which sets a default (refused by np.ma.masked).
            fa, fb = a._fill_value, b._fill_value
            if (fa is None) != (fb is None):
                return f"{where}: a fill value on one side only"
            if fa is not None:
                fa, fb = np.asarray(fa), np.asarray(fb)
                if fa.dtype != fb.dtype or _array_bytes(fa) != _array_bytes(fb) or (
                        fa.dtype.hasobject and fa.tolist() != fb.tolist()):
                    return f"{where}: fill value {fa!r} != {fb!r}"
            if (a.hardmask, a.baseclass) != (b.hardmask, b.baseclass):
                return f"{where}: hardmask or baseclass differ"
            a, b = a.data, b.data
        if not a.dtype.hasobject:
            return None if _array_bytes(a) == _array_bytes(b) else f"{where}: bytes differ"
        if type(a.dtype) is not np.dtype:  # StringDType: strings and NAs
            la, lb = a.tolist(), b.tolist()
            return None if repr(la) == repr(lb) else f"{where}: items {la!r:.80} != {lb!r:.80}"
        for index in np.ndindex(a.shape):
            found = self.differ(a[index], b[index], f"{where}{list(index)}")
            if found:
                return found
        return None

    def _tensors(self, a, b, where):
        import torch

        self.memory.append((a, b))
        facts = [(t.dtype, tuple(t.shape), t.stride(), t.storage_offset(), t.requires_grad,
                  t.is_leaf, t.device, t.is_contiguous(), t.untyped_storage().nbytes())
                 for t in (a, b)]
        if facts[0] != facts[1]:
            return f"{where}: tensor {facts[0]} != {facts[1]}"
        if getattr(a, "__dict__", None) != getattr(b, "__dict__", None):
            return f"{where}: tensor attributes differ"
        flat = [t.detach().contiguous().reshape(-1) for t in (a, b)]
        if a.dtype is torch.bool:
            flat = [t.to(torch.uint8) for t in flat]
        raw = [bytes(t.view(torch.uint8).numpy()) if t.numel() else b"" for t in flat]
        return None if raw[0] == raw[1] else f"{where}: tensor bytes differ"

    def _jax(self, a, b, where):
        facts = [(x.dtype, x.shape, x.weak_type, str(x.sharding)) for x in (a, b)]
        if facts[0] != facts[1]:
            return f"{where}: jax {facts[0]} != {facts[1]}"
        return None if np.asarray(a).tobytes() == np.asarray(b).tobytes() else (
            f"{where}: jax bytes differ")

    def sharing(self):
        """Which of the arrays and tensors met share memory, on each side."""
        pairs = self.memory[:24]
        for i, (a1, b1) in enumerate(pairs):
            for a2, b2 in pairs[i + 1:]:
                if _shares(a1, a2) != _shares(b1, b2):
                    return "memory shared on one side only"
        return None


def _shares(x, y):
    if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
        return bool(np.shares_memory(x, y)) if x.dtype != object and y.dtype != object and (
            type(x.dtype) is np.dtype and type(y.dtype) is np.dtype) else x is y
    if _is_torch(x) and _is_torch(y):
        return x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr() and (
            x.untyped_storage().nbytes() > 0)
    return False


def first_difference(trusted, restricted):
    """``None`` if the two loads gave the same object, else what differs first."""
    comparison = Comparison()
    found = comparison.differ(trusted, restricted, "obj")
    return found or comparison.sharing()


# -- the run -------------------------------------------------------------------------------

def check(name, obj, family, label, data, is_dump, counts, problems):
    """Load ``data`` trusted and restricted, compare, count; a dump's dry run too."""
    import cpersist

    counts["loads compared"] += 1
    try:
        trusted = _load(data, True)
    except Exception as exc:  # noqa: BLE001 - a trusted load failing is reported
        counts["trusted failed"] += 1
        problems.append(f"{name} [{label}]: the trusted load fails: {type(exc).__name__}: "
                        f"{str(exc)[:200]}")
        return
    try:
        restricted = _load(data, False)
    except cpersist.CpersistError as exc:
        counts["refused"] += 1
        problems.append(f"{name} [{label}]: refused: {type(exc).__name__}: {str(exc)[:300]}")
        return
    except Exception as exc:  # noqa: BLE001 - a restricted load must raise cpersist's errors
        counts["restricted failed"] += 1
        problems.append(f"{name} [{label}]: the restricted load raises {type(exc).__name__}: "
                        f"{str(exc)[:200]}")
        return
    found = first_difference(trusted, restricted)
    if found:
        counts["differing"] += 1
        problems.append(f"{name} [{label}]: {found}")
    else:
        counts["identical"] += 1
    if is_dump:
        counts["dry runs"] += 1
        verdict = cpersist.verify(io.BytesIO(data))["restricted_load"]
        if not verdict["accepted"]:
            counts["dry run refused"] += 1
            problems.append(f"{name} [{label}]: the dry run refuses it: {verdict['refusal']}")


def run(every=1, compress=COMPRESS, protocols=PROTOCOLS, families=None, out=None, part=(0, 1)):
    """Compare the loads of one object in ``every`` (of those numbered
    ``part[0]`` modulo ``part[1]``); ``(counts, problems)``."""
    counts = collections.Counter()
    problems = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for number, (name, obj, family) in enumerate(benign_objects()):
            if number % every or number % part[1] != part[0] or (
                    families is not None and family not in families):
                continue
            counts["objects"] += 1
            counts[f"objects ({family})"] += 1
            try:
                levels = compress + ("max",) if number % MAX_EVERY == 0 else compress
                for label, data, is_dump in encodings(obj, family, levels, protocols):
                    check(name, obj, family, label, data, is_dump, counts, problems)
            except Exception as exc:  # noqa: BLE001 - a dump failing is reported
                counts["dump failed"] += 1
                problems.append(f"{name}: the dump fails: {type(exc).__name__}: {exc}")
            if out is not None and counts["objects"] % 500 == 0:
                print(f"... {counts['objects']} objects, {counts['loads compared']} loads",
                      file=out, flush=True)
    return counts, problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=int, default=1,
                        help="compare one object in EVERY (default: all)")
    parser.add_argument("--part", default="0/1",
                        help="K/N: compare only objects numbered K modulo N (to run N "
                             "processes side by side; add their counts)")
    parser.add_argument("--show", type=int, default=50,
                        help="list at most this many differences (default 50)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    part = tuple(int(n) for n in args.part.split("/"))
    counts, problems = run(args.every, out=sys.stdout, part=part)
    seconds = time.perf_counter() - start
    import numpy
    versions = [f"numpy {numpy.__version__}"]
    for module in ("torch", "ml_dtypes", "jax"):
        if module in sys.modules:
            versions.append(f"{module} {sys.modules[module].__version__}")
    print(f"Python {sys.version.split()[0]}, {', '.join(versions)}; {seconds:.0f} s")
    for key in ("objects", *sorted(k for k in counts if k.startswith("objects (")),
                "loads compared", "identical", "differing", "refused", "trusted failed",
                "restricted failed", "dump failed", "dry runs", "dry run refused"):
        print(f"{key:>24}: {counts[key]}")
    for line in problems[:args.show]:
        print(line)
    if len(problems) > args.show:
        print(f"... and {len(problems) - args.show} more")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
