"""Restricted loads: a catalog of malicious files, each refused before it runs.

Every payload, when unpickled without restriction, creates a sentinel file;
the catalog test first proves that (in a child process running a trusted
load), then checks that a restricted load raises and the sentinel never
appears.
"""

import copyreg
import fractions
import io
import pickle
import sys
import textwrap
import time
import types

import numpy as np
import pytest
from ._forge import Point, call, proto, s, stack_global, write_container

import cpersist
from cpersist.pickler import stored_array
from cpersist.pickling.unpickler import SAFE_GLOBALS, SAFE_SUBSTITUTES
from ._fresh import run_code
from .conftest import assert_same


def _touch_code(path):
    return f"open({str(path)!r}, 'w').close()"


def _global0(module, name):
    """Protocol-0 GLOBAL opcode."""
    return pickle.GLOBAL + f"{module}\n{name}\n".encode()


# Each entry: name -> function(sentinel path) -> pickle stream. Every stream,
# loaded by plain pickle, creates the sentinel.
PAYLOADS = {
    "os.system": lambda p: proto(4, call(stack_global("os", "system"), s(f"touch {p}"))),
    "posix.system": lambda p: proto(2, call(_global0("posix", "system"), s(f"touch {p}"))),
    "subprocess.Popen": lambda p: proto(4, call(
        stack_global("subprocess", "Popen"),
        pickle.MARK + s("touch") + s(str(p)) + pickle.LIST)),
    "subprocess.check_call": lambda p: proto(4, call(
        stack_global("subprocess", "check_call"),
        pickle.MARK + s("touch") + s(str(p)) + pickle.LIST)),
    "builtins.eval": lambda p: proto(4, call(stack_global("builtins", "eval"), s(_touch_code(p)))),
    "builtins.exec": lambda p: proto(4, call(stack_global("builtins", "exec"), s(_touch_code(p)))),
    "__builtin__.eval (protocol 2 name)": lambda p: proto(
        2, call(_global0("__builtin__", "eval"), s(_touch_code(p)))),
    "getattr chain": lambda p: proto(4, call(
        call(stack_global("builtins", "getattr"),
             call(stack_global("builtins", "__import__"), s("os")), s("system")),
        s(f"touch {p}"))),
    "importlib.import_module": lambda p: proto(4, call(
        call(stack_global("builtins", "getattr"),
             call(stack_global("importlib", "import_module"), s("os")), s("system")),
        s(f"touch {p}"))),
    "pickle.loads nested": lambda p: proto(4, call(
        stack_global("pickle", "loads"),
        pickle.SHORT_BINBYTES + bytes([len(_inner(p))]) + _inner(p))),
    "_pickle.loads nested": lambda p: proto(4, call(
        stack_global("_pickle", "loads"),
        pickle.SHORT_BINBYTES + bytes([len(_inner(p))]) + _inner(p))),
    "numpy runstring (exec of a string)": lambda p: proto(4, call(
        stack_global("numpy.testing._private.utils", "runstring"),
        s(_touch_code(p)), pickle.EMPTY_DICT)),
    "numpy dotted name to os.system": lambda p: proto(4, call(
        stack_global("numpy", "testing._private.utils.os.system"), s(f"touch {p}"))),
    "numpy.memmap creates a file": lambda p: proto(4, call(
        stack_global("numpy", "memmap"), s(str(p)), s("uint8"), s("w+"),
        pickle.BININT1 + b"\x00", pickle.MARK + pickle.BININT1 + b"\x01" + pickle.TUPLE)),
    "builtins.open for writing": lambda p: proto(4, call(
        stack_global("builtins", "open"), s(str(p)), s("w"))),
    "INST opcode": lambda p: (
        pickle.MARK + pickle.STRING + f"'touch {p}'\n".encode()
        + pickle.INST + b"os\nsystem\n" + pickle.STOP),
    "OBJ opcode": lambda p: (
        pickle.MARK + _global0("os", "system") + pickle.STRING + f"'touch {p}'\n".encode()
        + pickle.OBJ + pickle.STOP),
    # cls.__new__(cls, *args, **kwargs): numpy.memmap's __new__ creates the file.
    "NEWOBJ_EX opcode": lambda p: proto(4, (
        stack_global("numpy", "memmap") + pickle.MARK + s(str(p)) + pickle.TUPLE
        + pickle.EMPTY_DICT + pickle.MARK + s("mode") + s("w+") + s("shape")
        + pickle.BININT1 + b"\x01" + pickle.SETITEMS + pickle.NEWOBJ_EX)),
    "NEWOBJ opcode": lambda p: proto(2, (
        _global0("numpy", "memmap") + pickle.MARK + s(str(p)) + s("uint8") + s("w+")
        + pickle.BININT1 + b"\x00" + pickle.BININT1 + b"\x01" + pickle.TUPLE
        + pickle.NEWOBJ)),
    "hidden in an allowed container": lambda p: proto(4, (
        pickle.EMPTY_LIST + pickle.MARK + pickle.BININT1 + b"\x01"
        + call(stack_global("os", "system"), s(f"touch {p}")) + pickle.APPENDS)),
    "memo-shuffled STACK_GLOBAL": lambda p: proto(4, (
        s("system") + pickle.MEMOIZE + pickle.POP + s("os") + pickle.MEMOIZE + pickle.POP
        + pickle.BINGET + b"\x01" + pickle.BINGET + b"\x00" + pickle.STACK_GLOBAL
        + pickle.MARK + s(f"touch {p}") + pickle.TUPLE + pickle.REDUCE)),
}


def _inner(path):
    """A pickle stream running ``touch path``, to nest inside another."""
    return proto(4, call(stack_global("os", "system"), s(f"touch {path}")))


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    """The malicious files, and proof that each one runs code when trusted."""
    root = tmp_path_factory.mktemp("malicious")
    files = {}
    for i, (name, make) in enumerate(PAYLOADS.items()):
        proof = root / f"proof{i}"
        files[name] = (i, write_container(root / f"evil{i}.cp", make(proof)))
    # A trusted load in a child process must run every payload.
    script = textwrap.dedent("""
        import sys, cpersist
        for path in sys.argv[1:]:
            try:
                cpersist.load(path, trusted=True)
            except Exception:
                pass
    """)
    run_code(script, *(f for _, f in files.values()), check=True, timeout=60)
    deadline = time.monotonic() + 10  # subprocess.Popen's child may lag
    for name, (i, _) in files.items():
        proof = root / f"proof{i}"
        while not proof.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proof.exists(), f"payload {name!r} does not work: the test proves nothing"
    return files


@pytest.mark.parametrize("name", list(PAYLOADS))
@pytest.mark.parametrize("trusted", [False, [("tests._forge", "Point")], ["tests._forge"]])
def test_malicious_file_refused(catalog, tmp_path, name, trusted):
    _, path = catalog[name]
    sentinel = tmp_path / "sentinel"
    # Rebuild the payload aimed at this test's own sentinel.
    evil = write_container(tmp_path / "evil.cp", PAYLOADS[name](sentinel))
    with pytest.raises(cpersist.UntrustedObjectError) as info:
        cpersist.load(evil, trusted=trusted)
    assert str(evil) in str(info.value)
    time.sleep(0.01)
    assert not sentinel.exists(), f"{name}: code ran in a restricted load"


def test_refusal_names_the_global(tmp_path):
    evil = write_container(tmp_path / "e.cp", PAYLOADS["os.system"](tmp_path / "x"))
    with pytest.raises(cpersist.UntrustedObjectError) as info:
        cpersist.load(evil, trusted=False)
    assert (info.value.module, info.value.name) == ("os", "system")
    assert "os.system" in str(info.value)


def test_refused_before_import(tmp_path):
    """The name alone decides: a refused module is never imported."""
    module = "cpersist_test_never_imported_module"
    evil = write_container(tmp_path / "e.cp", proto(4, call(stack_global(module, "f"))))
    with pytest.raises(cpersist.UntrustedObjectError):
        cpersist.load(evil, trusted=False)
    assert module not in sys.modules


def test_dunder_names_refused_even_in_trusted_prefix(tmp_path):
    evil = write_container(tmp_path / "e.cp", proto(4, call(
        stack_global("tests._forge", "Point.__init__.__globals__"))))
    with pytest.raises(cpersist.UntrustedObjectError):
        cpersist.load(evil, trusted=["tests._forge"])


def test_trusted_prefix_only_accepts_objects_it_defines(tmp_path):
    # _forge imports pickle: trusting _forge does not trust pickle.loads.
    sentinel = tmp_path / "sentinel"
    evil = write_container(tmp_path / "e.cp", proto(4, call(
        stack_global("tests._forge", "pickle.loads"),
        pickle.SHORT_BINBYTES + bytes([len(_inner(sentinel))]) + _inner(sentinel))))
    with pytest.raises(cpersist.UntrustedObjectError, match="outside the trusted"):
        cpersist.load(evil, trusted=["tests._forge"])
    assert not sentinel.exists()
    with pytest.raises(cpersist.UntrustedObjectError):
        cpersist.load(evil, trusted=[("tests._forge", "Point")])


def test_extension_codes_refused(tmp_path):
    sentinel = tmp_path / "sentinel"
    stream = proto(2, pickle.EXT1 + b"\xf0" + pickle.MARK + s(f"touch {sentinel}")
                   + pickle.TUPLE + pickle.REDUCE)
    evil = write_container(tmp_path / "e.cp", stream)
    # Unregistered: refused all the same (whatever the registry holds).
    with pytest.raises(cpersist.UntrustedObjectError, match="extension code 240"):
        cpersist.load(evil, trusted=False)
    copyreg.add_extension("os", "system", 0xF0)
    try:
        # A plain load would now resolve it through copyreg's cache, without
        # calling find_class: warm the cache as an earlier load would have.
        assert pickle.loads(pickle.PROTO + b"\x02" + pickle.EXT1 + b"\xf0" + pickle.STOP)
        with pytest.raises(cpersist.UntrustedObjectError, match="extension code 240"):
            cpersist.load(evil, trusted=False)
    finally:
        copyreg.remove_extension("os", "system", 0xF0)
    assert not sentinel.exists()


def test_persistent_ids_refused(tmp_path):
    for stream in (proto(4, s("x") + pickle.BINPERSID),
                   pickle.PERSID + b"0\n" + pickle.STOP):
        evil = write_container(tmp_path / "e.cp", stream)
        for trusted in (True, False):
            with pytest.raises(cpersist.CorruptFileError, match="persistent id"):
                cpersist.load(evil, trusted=trusted)


@pytest.mark.parametrize("index", [1, 7, 10**9, -1, "0", None])
def test_array_references_outside_the_index(tmp_path, index):
    arg = pickle.dumps(index, protocol=2)[2:-1]  # the opcodes pushing `index`
    stream = proto(4, call(stack_global("cpersist.pickler", "stored_array"), arg))
    evil = write_container(tmp_path / "e.cp", stream,
                           arrays=[(b"\x00" * 8, {"kind": "array", "dtype": "'<f8'",
                                                  "shape": [1], "order": "C"})])
    for trusted in (True, False):
        with pytest.raises(cpersist.CorruptFileError, match="bad array section"):
            cpersist.load(evil, trusted=trusted)


def test_setting_attributes_on_allowed_classes_is_refused(tmp_path):
    before = fractions.Fraction.__repr__
    stream = proto(4, (
        stack_global("fractions", "Fraction")
        + pickle.NONE + pickle.EMPTY_DICT + s("__repr__") + stack_global("builtins", "str")
        + pickle.SETITEM + pickle.TUPLE2 + pickle.BUILD))
    evil = write_container(tmp_path / "e.cp", stream)
    try:
        with pytest.raises(cpersist.UntrustedObjectError, match="tried to change it .BUILD."):
            cpersist.load(evil, trusted=False)
        assert fractions.Fraction.__repr__ is before
    finally:
        fractions.Fraction.__repr__ = before


def test_codecs_encode_only_latin1(tmp_path):
    stream = proto(2, call(_global0("_codecs", "encode"), s("x"), s("rot13")))
    evil = write_container(tmp_path / "e.cp", stream)
    with pytest.raises(cpersist.CorruptFileError, match="latin1"):
        cpersist.load(evil, trusted=False)


# -- the allowlist itself -----------------------------------------------------

_DANGEROUS = {eval, exec, getattr, setattr, delattr, __import__, open, compile, input,
              breakpoint, vars, globals, locals, type, object, memoryview, np.memmap,
              np.load, np.fromfile, copyreg.__newobj__}


def test_allowlist_holds_no_code_running_callable():
    import importlib
    import warnings
    checked = 0
    for module, name in SAFE_GLOBALS - set(SAFE_SUBSTITUTES):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # numpy.core
            try:
                obj = importlib.import_module(module)
                for part in name.split("."):
                    obj = getattr(obj, part)
            except (ImportError, AttributeError):
                continue  # a name of another numpy version
        checked += 1
        assert not isinstance(obj, types.ModuleType), (module, name)
        assert obj not in _DANGEROUS, (module, name)
        owner = getattr(obj, "__module__", "") or type(obj).__module__
        assert owner.split(".")[0] in ("builtins", "collections", "datetime", "decimal",
                                       "_decimal", "fractions", "uuid", "copyreg",
                                       "numpy", "cpersist", "torch", "ml_dtypes"), (
            module, name, owner)
        if owner == "ml_dtypes":  # its scalar types, as dtypes' types
            assert isinstance(obj, type) and issubclass(obj, np.generic), (module, name)
        assert not name.startswith("_") or name in (
            "_reconstructor", "_reconstruct", "_frombuffer", "_mareconstruct",
            "_convert_to_stringdtype_kwargs"), name
    assert checked > 40
    assert ("numpy", "memmap") not in SAFE_GLOBALS
    assert set(SAFE_SUBSTITUTES) == {("_codecs", "encode")}


# -- what restricted loads do accept -----------------------------------------

def _typical():
    import collections
    import datetime
    import decimal
    import uuid
    return {
        "weights": np.arange(12.0).reshape(3, 4),
        "fortran": np.asfortranarray(np.ones((3, 5), np.int16)),
        "objects": np.array([None, "a", 1.5], dtype=object),
        "masked": np.ma.array([1, 2, 3], mask=[0, 1, 0]),
        "scalars": [np.float32(1.5), np.int64(3), np.bool_(True), np.str_("s")],
        "dtype": np.dtype([("a", "<i4"), ("b", "S3")]),
        "containers": (set([1, 2]), frozenset("ab"), bytearray(b"xy"), b"\xff\x00",
                       1 + 2j, range(4), slice(1, 5, 2)),
        "collections": [collections.OrderedDict(a=1), collections.Counter("aab"),
                        collections.deque([1, 2])],
        "time": [datetime.datetime(2024, 1, 2, 3, 4, tzinfo=datetime.timezone.utc),
                 datetime.timedelta(days=3), decimal.Decimal("1.25"),
                 fractions.Fraction(3, 7), uuid.UUID(int=5)],
    }


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
@pytest.mark.parametrize("compress", [0, "zstd"])
def test_plain_data_loads_restricted(protocol, compress):
    obj = _typical()
    buf = io.BytesIO()
    cpersist.dump(obj, buf, compress=compress, protocol=protocol)
    buf.seek(0)
    assert_same(obj, cpersist.load(buf, trusted=False))


def test_user_class_needs_trust():
    obj = {"p": Point(1, np.arange(3))}
    buf = io.BytesIO()
    cpersist.dump(obj, buf)
    for trusted in (False, [("tests._forge", "Other")], ["tests._forg"]):
        buf.seek(0)
        with pytest.raises(cpersist.UntrustedObjectError, match="tests._forge.Point"):
            cpersist.load(buf, trusted=trusted)
    for trusted in ([("tests._forge", "Point")], ["tests._forge"], ("tests._forge", "Point"), "tests._forge", True):
        buf.seek(0)
        out = cpersist.load(buf, trusted=trusted)
        assert out["p"].x == 1 and np.array_equal(out["p"].y, np.arange(3))


@pytest.mark.parametrize("bad", [1, [1], [("a",)], [("a", 1)], [""], object()])
def test_bad_trusted_argument(bad):
    buf = io.BytesIO()
    cpersist.dump([1], buf)
    buf.seek(0)
    with pytest.raises(ValueError, match="trusted"):
        cpersist.load(buf, trusted=bad)


def test_stored_array_placeholder_refuses_plain_pickle():
    with pytest.raises(pickle.UnpicklingError, match="cpersist.load"):
        stored_array(0)
