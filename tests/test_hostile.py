"""Hostile files: a restricted load and the inspection tools crash nothing,
run nothing, change nothing in the process, and stay within their limits.

Every stream is wrapped in a genuine cpersist file (correct checksums): the
attack is the pickle stream itself. The corpus is in :mod:`tests._hostile`;
its full-size cases run in a subprocess under a memory limit.
"""

import copyreg
import io
import json
import os
import pickle
import random
import sys
import warnings

import numpy as np
import pytest

import cpersist
from cpersist.stream import args as _pickle_args
from cpersist.stream.opcodes import walk
from cpersist.codecs import get_codec
from cpersist.container import ContainerWriter
from cpersist.exceptions import (CorruptFileError, CpersistError, LimitExceededError,
                                 UntrustedObjectError)
from cpersist.pickling.unpickler import SAFE_GLOBALS, ArrayUnpickler

from . import _hostile
from ._forge import container_bytes
from ._fresh import ROOT, run_python

#: What a restricted load of each reproducer gives: the error, or None (loads).
EXPECTED = {
    "object-array-over-bytes": CorruptFileError,
    "object-array-via-numpy-core": CorruptFileError,
    "dtype-field-outside-item": CorruptFileError,
    "dtype-object-flags-lie": CorruptFileError,
    "void-object-over-bytes": CorruptFileError,
    "reconstruct-object-state": CorruptFileError,
    "builtin-dtype-state": None,
    "recarray-object-over-bytes": CorruptFileError,
    "build-on-function": UntrustedObjectError,
    "build-on-class": UntrustedObjectError,
    "build-on-masked-singleton": UntrustedObjectError,
    "setitem-on-class": UntrustedObjectError,
    "hex-int-then-extension": UntrustedObjectError,
    "memo-index-2**28": None,
    "empty-sets": None,
    "empty-dicts": None,
    "dups": None,
    "fraction-1e10000000": LimitExceededError,
    "int-of-decimal": LimitExceededError,
    "bytes-10**10": LimitExceededError,
    "list-of-range": LimitExceededError,
    "int-of-long-text": LimitExceededError,
    "long-text": CpersistError,
    "huge-shape": LimitExceededError,
    "matrix-of-nested-range": LimitExceededError,
    "void-of-huge-dtype": LimitExceededError,
    "deep-dicts": None,
    "deep-lists": None,
}

SMALL = _hostile.reproducers(scale=0.001)


def _file(stream, codec=None):
    """A cpersist file (bytes) whose pickle stream is ``stream``, in chunks of 1 MiB."""
    buf = io.BytesIO()
    writer = ContainerWriter(buf)
    view = memoryview(stream)
    chunks = [view[i:i + (1 << 20)] for i in range(0, len(view), 1 << 20)]
    root = writer.add_section(chunks, codec=codec, meta={"kind": "pickle"})
    writer.finish(root)
    return buf.getvalue()


def _restricted(stream, limits=None):
    """Run ``stream`` as a restricted load does, without a container."""
    return ArrayUnpickler(io.BytesIO(stream), lambda index: np.zeros(1), True,
                          source="<stream>", limits=limits).load()


def test_every_reproducer_is_listed():
    assert set(EXPECTED) == set(SMALL)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_reproducer_restricted(name, tmp_path):
    path = tmp_path / "h.cp"
    path.write_bytes(container_bytes(SMALL[name]))
    expected = EXPECTED[name]
    def open_load():
        with cpersist.open(path, trusted=False) as handle:
            return handle.load()

    def arrays(p):
        with cpersist.open(p) as handle:
            return handle.arrays

    loaders = (lambda: cpersist.load(path, trusted=False),
               lambda: cpersist.loads(path.read_bytes(), trusted=False), open_load)
    for load in loaders:
        if expected is None:
            load()
        else:
            with pytest.raises(expected) as info:
                load()
            if expected is LimitExceededError:
                assert "limits=cpersist.Limits(" in str(info.value)
    # The tools that read without loading never fail but on damage or limits.
    for tool in (cpersist.inspect, cpersist.verify, arrays,
                 lambda p: cpersist.convert(p, f"{p}.converted.cp", compress=3)):
        try:
            tool(path)
        except CpersistError:
            pass


def test_forged_dtypes_never_reach_numpy():
    # The dtype a forged state describes is refused; numpy's own float64 is untouched.
    before = np.dtype("f8").byteorder, np.dtype("f8").flags
    got = _restricted(SMALL["builtin-dtype-state"])
    assert got == np.dtype(">f8")
    assert (np.dtype("f8").byteorder, np.dtype("f8").flags) == before
    with pytest.raises(CorruptFileError, match="outside an item"):
        _restricted(SMALL["dtype-field-outside-item"])
    with pytest.raises(CorruptFileError, match="Python objects"):
        _restricted(SMALL["dtype-object-flags-lie"])


def test_numpy_pickles_load_restricted():
    """What numpy's own pickling writes (the pickle-style fallbacks) loads
    under the checks, equal to a plain load, at every protocol."""
    values = {
        "dt": np.dtype([("a", "<f8"), ("b", "O"), ("c", ("i2", (2, 3)))], align=True),
        "obj": np.array([1, "a", None], dtype=object),
        "rec": np.rec.array([(1, 2.0)], dtype=[("x", "i4"), ("y", "f8")]),
        "structured": np.zeros(3, dtype=[("p", "<u2"), ("q", ">f4", (2,))]),
        "m8": np.array([1, 2], dtype="M8[s]"), "u": np.array(["abc"]),
        "scalar": np.float32(1.5), "void": np.zeros(2, dtype="V3")[0],
        "masked": np.ma.masked_array([1.0, 2.0], [0, 1]), "fortran": np.asfortranarray(
            np.arange(6.0).reshape(2, 3)), "titles": np.dtype({"names": ["a"], "formats": ["f8"],
                                                              "titles": ["T"]}),
    }
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        raw = pickle.dumps(values, protocol)
        assert pickle.dumps(_restricted(raw), 4) == pickle.dumps(pickle.loads(raw), 4)


def test_extension_code_refused_whatever_the_registry(tmp_path):
    sentinel = tmp_path / "sentinel"
    stream = _hostile.proto(2, b"I0x10\n" + pickle.POP + pickle.EXT1 + b"\xf0"
                            + _hostile.tup(_hostile.s(f"touch {sentinel}")) + pickle.REDUCE)
    path = tmp_path / "e.cp"
    path.write_bytes(container_bytes(stream))
    copyreg.add_extension("os", "system", 0xF0)
    try:
        # Served from copyreg's cache from now on, without find_class.
        assert pickle.loads(pickle.PROTO + b"\x02" + pickle.EXT1 + b"\xf0" + pickle.STOP)
        with pytest.raises(UntrustedObjectError, match="extension code 240"):
            cpersist.load(path, trusted=False)
        assert cpersist.inspect(path)["extension_codes"] == [240]
    finally:
        copyreg.remove_extension("os", "system", 0xF0)
    assert not sentinel.exists()


def test_limits_name_the_argument_and_can_be_raised(tmp_path):
    stream = _hostile.proto(4, pickle.MARK + pickle.EMPTY_SET * 2000 + pickle.POP_MARK
                            + pickle.NONE)
    path = tmp_path / "sets.cp"
    path.write_bytes(container_bytes(stream))
    small = cpersist.Limits(max_objects=1000)
    with pytest.raises(LimitExceededError, match=r"limits\.max_objects=1,000") as info:
        cpersist.load(path, trusted=False, limits=small)
    assert info.value.limit == "max_objects"
    assert "limits=cpersist.Limits(max_objects=...)" in str(info.value)
    assert cpersist.load(path, trusted=False, limits={"max_objects": 3000}) is None
    dups = _hostile.proto(4, pickle.NONE + pickle.DUP * 40_000)
    path.write_bytes(container_bytes(dups))

    def arrays(**kwargs):
        with cpersist.open(path, **kwargs) as handle:
            return handle.arrays

    for read in (lambda **k: cpersist.inspect(path, **k), lambda **k: cpersist.verify(path, **k),
                 arrays, lambda **k: cpersist.load(path, trusted=False, **k)):
        with pytest.raises(LimitExceededError, match="max_opcodes"):
            read(limits=cpersist.Limits(max_opcodes=20_000))
        read(limits=cpersist.Limits(max_opcodes=50_000))
    with pytest.raises(ValueError, match="fields are"):
        cpersist.load(path, trusted=False, limits={"max_opcode": 1})


# -- no lasting side effects ---------------------------------------------------

def _allowlisted():
    objects = []
    for module, name in sorted(SAFE_GLOBALS):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                obj = __import__(module, fromlist=[name])
                for part in name.split("."):
                    obj = getattr(obj, part)
            except (ImportError, AttributeError):
                continue
        objects.append((f"{module}.{name}", obj))
    return objects


def _snapshot(objects):
    """Every attribute of the allowlist's objects (and numpy's shared
    dtypes and masked constant) a stream could have changed, by identity."""
    state = {}
    for where, obj in objects:
        try:
            attrs = {key: id(value) for key, value in vars(obj).items()}
        except TypeError:  # no __dict__
            attrs = {}
        for key in ("__module__", "__qualname__", "__name__", "__defaults__",
                    "__kwdefaults__", "__code__", "__doc__"):
            try:
                value = getattr(obj, key)
            except AttributeError:
                continue
            attrs[key] = value if isinstance(value, (str, type(None))) else id(value)
        state[where] = attrs
    for text in ("f8", "O", "i4", "V8", "U1", "M8"):
        d = np.dtype(text)
        state[f"dtype {text}"] = (d.str, d.flags, d.itemsize, d.byteorder, d.fields)
    masked = np.ma.masked
    state["masked"] = (masked.dtype, masked.shape, bool(masked._mask),
                       np.ndarray.tobytes(masked), masked.__array_interface__["data"][0])
    return state


def test_hostile_loads_change_nothing():
    objects = _allowlisted()
    before = _snapshot(objects)
    rng = random.Random(20261126)
    count = refused = 0
    for stream in _hostile.generate(rng, 5000):
        count += 1
        try:
            _restricted(stream)
        except CpersistError:
            refused += 1
        # Anything else propagates: a bare exception from a file is a failure.
    for stream in SMALL.values():
        try:
            _restricted(stream)
        except CpersistError:
            refused += 1
    assert _snapshot(objects) == before
    assert refused > count // 2  # the generator is hostile enough to matter
    # What the old hole broke: compressed dumps of small arrays still pickle.
    small = cpersist.dumps({"a": np.arange(3)}, compress=3)
    assert cpersist.loads(small)["a"].tolist() == [0, 1, 2]


# -- one parser decides: the walker, the restricted load and the C unpickler ----

class _RecordingUnpickler(pickle.Unpickler):
    """The C unpickler, resolving only harmless names, recording them."""

    SAFE = {("builtins", n) for n in ("set", "list", "tuple", "frozenset", "int", "str")} | {
        ("collections", "OrderedDict")}

    def __init__(self, file):
        super().__init__(file)
        self.resolved = set()

    def find_class(self, module, name):
        if (module, name) not in self.SAFE:
            raise pickle.UnpicklingError(f"not here: {module}.{name}")
        self.resolved.add(f"{module}.{name}")
        return super().find_class(module, name)


def _c_load(stream):
    unpickler = _RecordingUnpickler(io.BytesIO(stream))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # a STRING's bad escape
            return True, unpickler.load(), unpickler.resolved
    except Exception:
        return False, None, unpickler.resolved


def _canonical(value):
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_canonical(v) for v in value])
    if isinstance(value, dict):
        return ("dict", sorted((repr(k), _canonical(v)) for k, v in value.items()))
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, sorted(map(repr, value)))
    if isinstance(value, float) and value != value:
        return ("nan",)
    return (type(value).__name__, repr(value))


def check_agree(stream):
    """The C unpickler, the walker and the restricted load agree on ``stream``."""
    ok, value, resolved = _c_load(stream)
    walked = walk(stream)
    if walked.error == _pickle_args.FRAME_CROSSED:
        # Refused by both readers of cpersist (the C unpickler reads it one
        # way from bytes and another from a file).
        with pytest.raises(CpersistError):
            ArrayUnpickler(io.BytesIO(stream), None, True, source="<s>").load()
        return
    if walked.error is not None:
        assert not ok, f"the walker stops ({walked.error}) where the C unpickler runs on"
    if ok:
        assert resolved <= walked.globals
        try:
            mine = ArrayUnpickler(io.BytesIO(stream), None, True,
                                  allowed=frozenset(_RecordingUnpickler.SAFE),
                                  source="<s>").load()
        except UntrustedObjectError:
            return  # it changed an object the stream did not make
        assert _canonical(mine) == _canonical(value)
    else:
        try:
            ArrayUnpickler(io.BytesIO(stream), None, True,
                           allowed=frozenset(_RecordingUnpickler.SAFE), source="<s>").load()
        except CpersistError:
            pass


#: Arguments in the forms the C unpickler accepts beside the usual ones (and a
#: few it refuses), for the text opcodes.
ODD_INTS = ["0x10", "010", " 7", "+1", "-0x1f", "1_000", "00", "01", " 1", "0x", "12\x00junk",
            "99999999999999999999", "0777777777777777777777777", "-0", "0b1", "0o7", "", "x",
            "0X1F", "9" * 30, "\t5"]
ODD_FLOATS = ["1.5", "inf", "-nan", "1e400", "1_0.5", " 1.5", "1.5x", ".5", "5.", "1e", "infinity",
              "NaN", "-1e-400", "0x1p3", "1.5\x00z"]
ODD_STRINGS = ["'a'", '"b"', "'\\x41'", "'\\q'", "abc", "'a\"", "'\\x4'", "'é'"]


def _pieces():
    from hypothesis import strategies as st

    text = st.sampled_from(ODD_INTS)
    return st.one_of(
        text.map(lambda t: b"I" + t.encode() + b"\n"),
        text.map(lambda t: b"L" + t.encode() + b"L\n"),
        text.map(lambda t: b"L" + t.encode() + b"\n"),
        st.sampled_from(ODD_FLOATS).map(lambda t: b"F" + t.encode() + b"\n"),
        st.sampled_from(ODD_STRINGS).map(lambda t: b"S" + t.encode() + b"\n"),
        st.text(max_size=4).map(lambda t: b"V" + t.encode("raw-unicode-escape") + b"\n"),
        st.sampled_from(["0", " 1", "+0", "0_0", "-1", "x", "1\x00"]).flatmap(
            lambda t: st.sampled_from([b"g", b"p"]).map(lambda c: c + t.encode() + b"\n")),
        st.sampled_from([b"builtins\nset\n", b"builtins\nlist\n", b"collections\nOrderedDict\n",
                         b"builtins\nnope\n"]).map(lambda t: b"c" + t),
        st.binary(min_size=1, max_size=3).map(lambda b: b"\x8a" + bytes([len(b)]) + b),
        st.binary(max_size=4).map(lambda b: b"\x8c" + bytes([len(b)]) + b),
        st.binary(max_size=4).map(lambda b: b"C" + bytes([len(b)]) + b),
        st.integers(-2, 6).map(lambda n: b"\x8b" + n.to_bytes(4, "little", signed=True)),
        st.integers(0, 40).map(lambda n: b"\x95" + n.to_bytes(8, "little")),
        st.integers(0, 7).map(lambda n: b"\x80" + bytes([n])),
        st.integers(0, 5).map(lambda n: b"h" + bytes([n])),
        st.integers(0, 5).map(lambda n: b"q" + bytes([n])),
        st.integers(0, 5).map(lambda n: b"r" + n.to_bytes(4, "little")),
        st.sampled_from([b"\x82\x01", b"\x83\x01\x00", b"T\xff\xff\xff\xff", b"U\x01\xff",
                         b"X\x02\x00\x00\x00\xed\xa0"]),
        st.sampled_from([bytes([code]) for code, name in _pickle_args.NAMES.items()
                         if name not in ("PERSID", "BINPERSID", "STOP")
                         and name not in _pickle_args._READERS]),
    )


def test_scan_and_unpickler_agree():
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=int(os.environ.get("CPERSIST_DIFF_EXAMPLES", "1500")),
              suppress_health_check=list(HealthCheck))
    @given(st.lists(_pieces(), max_size=14), st.booleans(), st.binary(max_size=3))
    def agree(pieces, stop, noise):
        stream = b"".join(pieces) + (b"." if stop else noise)
        check_agree(stream)
        check_agree(b"\x80\x04" + stream)

    agree()


def test_scan_and_unpickler_agree_on_mutated_streams():
    rng = random.Random(7)
    genuine = [pickle.dumps(v, p) for p in range(6) for v in (
        [1, "a", (2.5, None)], {"k": {1, 2}, "l": [True, b"x"]}, list(range(30)))]
    for _ in range(3000):
        stream = bytearray(rng.choice(genuine))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(stream))
            if rng.random() < 0.6:
                stream[at] = rng.randrange(256)
            else:
                stream[at:at] = rng.choice([b"I0x1\n", b"0", b"(", b"t", b"\x94", b"2", b"1"])
        check_agree(bytes(stream))


# A trusted load runs what the stream says: a forged dtype state can leave numpy
# an object it reports broken when freed (a restricted load refuses the state).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_forged_genuine_streams_raise_cpersist_errors(tmp_path):
    """A pickle stream, damaged and given correct checksums: every load,
    trusted or not, gives an object or a cpersist error (or, trusted, what
    pickle gives for a global that does not exist)."""
    obj = {"a": np.arange(5.0), "s": "text", "l": [1, (2, None), {"x": b"y"}],
           "big": 2**70, "f": 1.5, "dt": np.dtype("i4"), "small": np.arange(3, dtype=np.int8)}
    stream = pickle.dumps(obj, 4)  # a plain pickle stream: no section
    rng = random.Random(3)
    loaders = (lambda d: cpersist.loads(d), lambda d: cpersist.loads(d, trusted=False))
    for case in range(600):
        damaged = bytearray(stream)
        for _ in range(rng.randint(1, 3)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        data = container_bytes(bytes(damaged))
        for load in loaders:
            try:
                load(data)
            except CpersistError:
                pass
            except (AttributeError, ModuleNotFoundError, ImportError):
                pass  # a damaged global name, trusted: what pickle.load raises too


# -- the corpus at full size, in a subprocess with a memory limit -------------

#: Limits for the corpus run: the cases whose cost is their size are made
#: to exceed them at a tenth of their size (at the defaults they take tens of
#: seconds on a shared CI machine; docs/safety.rst gives their figures).
CORPUS_LIMITS = {"max_opcodes": 1_000_000, "max_objects": 200_000}


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS is Linux's")
def test_hostile_corpus_under_memory_limit(tmp_path):
    full = _hostile.reproducers(scale=0.1)
    full.update({name: stream for name, stream in _hostile.reproducers(scale=1).items()
                 if name.startswith(("deep-", "memo", "fraction", "int-", "bytes", "list"))})
    codec = get_codec("zstd", 3)
    paths = []
    for name, stream in full.items():
        if name == "hex-int-then-extension":
            continue  # needs a registered extension: tested above
        path = tmp_path / f"{name}.cp"
        path.write_bytes(_file(stream, codec))
        paths.append(str(path))
    rng = random.Random(11)
    for i, stream in enumerate(_hostile.generate(rng, 200)):
        path = tmp_path / f"generated-{i}.cp"
        path.write_bytes(_file(stream))
        paths.append(str(path))
    readers = "load,loads,open-load,inspect,verify,arrays,convert"
    done = run_python("-m", "tests._hostile", "3072", readers, json.dumps(CORPUS_LIMITS), *paths,
                      cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(results) == len(paths) * len(readers.split(","))
    for result in results:
        assert not (result["outcome"] or "").startswith("BARE"), result
        assert result["seconds"] < 20, result
    outcomes = {(r["path"].rsplit("/", 1)[1], r["reader"]): r["outcome"] for r in results}
    for name in ("empty-sets", "dups"):
        assert outcomes[(f"{name}.cp", "load")] == "LimitExceededError"
        assert outcomes[(f"{name}.cp", "inspect")] == "LimitExceededError"
