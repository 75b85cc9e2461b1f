"""A restricted load builds data, never what numpy's and Python's C
constructors make of a stranger's arguments.

One test per way a forged stream used to crash, hang, exhaust or change the
process through an allowlisted constructor; each stream is wrapped in a
genuine cpersist file. What checkpoints and numpy's own pickles need
(torch sizes, dtypes and devices; numpy 2 string arrays) loads as with a
trusted load.
"""

import io
import pickle
import struct

import numpy as np
import pytest

import cpersist
from cpersist.exceptions import CorruptFileError, LimitExceededError, UntrustedObjectError

from ._forge import call, container_bytes, proto, s
from ._hostile import binbytes, glob, integer, tup


def put(i):
    return pickle.BINPUT + bytes([i])


def get(i):
    return pickle.BINGET + bytes([i])


def load(stream, **kwargs):
    return cpersist.loads(container_bytes(stream), trusted=False, **kwargs)


def _bytearray(n):
    return call(glob("builtins", "bytearray"), integer(n))


def _emptied(memo):
    """``memo[memo][0:] = b''``: empties a bytearray kept in the memo."""
    return (get(memo) + call(glob("builtins", "slice"), integer(0), pickle.NONE)
            + binbytes(b"") + pickle.SETITEM + pickle.POP)


# -- arrays never view what the stream can change ------------------------------

@pytest.mark.parametrize("wrap", ["ndarray", "recarray", "asfortranarray"])
def test_array_over_a_bytearray_the_stream_then_empties(wrap):
    n = 1 << 24
    array = call(glob("numpy", "ndarray"), tup(integer(n)), s("u1"), get(0))
    if wrap == "recarray":
        array = call(glob("numpy", "recarray"), tup(integer(n)), s("u1"), get(0))
    elif wrap == "asfortranarray":
        array = call(glob("numpy", "asfortranarray"), array)
    stream = proto(2, _bytearray(n) + put(0) + pickle.POP + array + put(1) + pickle.POP
                   + _emptied(0) + get(1))
    with pytest.raises(UntrustedObjectError, match="SETITEM"):
        load(stream)
    # Without the SETITEM, the array is a copy: the bytearray is free to change.
    arr = load(proto(2, _bytearray(64) + put(0) + call(glob("numpy", "ndarray"),
                                                      tup(integer(64)), s("u1"), get(0))))
    assert arr.flags.owndata and arr.flags.writeable and not arr.any()


def test_tensor_only_over_a_stored_storage():
    torch = pytest.importorskip("torch")
    tensor = call(glob("cpersist.pickler", "rebuild_tensor"),
                  call(glob("numpy", "ndarray"), tup(integer(64)), s("u1"), get(0)),
                  s("uint8"), integer(0), tup(integer(64)), tup(integer(1)), pickle.NEWFALSE,
                  s("tensor"), pickle.NONE, pickle.NONE)
    with pytest.raises(CorruptFileError, match="storage is not an array of a section"):
        load(proto(2, _bytearray(64) + put(0) + pickle.POP + tensor))
    # A genuine one loads, restricted as trusted.
    t = torch.arange(6.0).reshape(2, 3)
    out = cpersist.loads(cpersist.dumps({"t": t}), trusted=False)["t"]
    assert torch.equal(out, t)


def test_array_offset_beyond_its_buffer():
    stream = proto(2, call(glob("numpy", "ndarray"), tup(integer(16)), s("u1"),
                           binbytes(b"x" * 8), integer(2**63 - 1)))
    with pytest.raises(CorruptFileError, match="offset"):
        load(stream)
    strides = proto(2, call(glob("numpy", "ndarray"), tup(integer(4)), s("u1"),
                            binbytes(b"x" * 8), integer(0), tup(integer(-1))))
    with pytest.raises(CorruptFileError, match="strides"):
        load(strides)
    ok = proto(2, call(glob("numpy", "ndarray"), tup(integer(4)), s("u1"),
                       binbytes(b"abcdefgh"), integer(2), tup(integer(1))))
    assert bytes(load(ok)) == b"cdef"


def test_array_without_buffer_is_zeros_not_heap():
    # Freed blocks of the same size full of a pattern, for np.empty to reuse.
    junk = [np.full(4096, 0xAB, np.uint8) for _ in range(64)]
    del junk
    for stream in (proto(2, call(glob("numpy", "ndarray"), tup(integer(4096)), s("u1"))),
                   proto(2, call(glob("numpy._core.multiarray", "_reconstruct"),
                                 glob("numpy", "ndarray"), tup(integer(4096)), s("u1")))):
        arr = load(stream)
        assert arr.shape == (4096,) and not arr.any()


_INLINE = glob("cpersist.pickler", "inline_array")
_BYTES = b"".join(struct.pack("<d", x) for x in (1.5, -2.0))


def _arguments(data_ops):
    """The arguments of ``inline_array`` of two float64 items, ``data_ops``
    pushing their bytes, as a tuple left on the stack."""
    return tup(data_ops, s("<f8"), tup(integer(2)), s("C"))


_BYTEARRAY8 = pickle.BYTEARRAY8 + struct.pack("<Q", len(_BYTES)) + _BYTES
#: An inline array's bytearray, or its arguments' tuple, also reachable from
#: another item of the object: before the call, after it, by DUP or the memo.
_SHARED = {
    "memo-before": _BYTEARRAY8 + put(0) + pickle.POP + _INLINE
    + _arguments(get(0)) + pickle.REDUCE + get(0),
    "dup-before": _INLINE + pickle.MARK + _BYTEARRAY8 + pickle.DUP + put(0) + pickle.POP
    + s("<f8") + tup(integer(2)) + s("C") + pickle.TUPLE + pickle.REDUCE + get(0),
    "memo-after": _INLINE + _arguments(_BYTEARRAY8 + put(0)) + pickle.REDUCE + get(0),
    "arguments-after": _INLINE + _arguments(_BYTEARRAY8) + put(0) + pickle.REDUCE + get(0),
    "arguments-before": _INLINE + _arguments(_BYTEARRAY8) + pickle.DUP + put(0) + pickle.POP
    + pickle.REDUCE + get(0),
    "two-arrays": _INLINE + _arguments(_BYTEARRAY8 + put(0)) + pickle.REDUCE
    + _INLINE + _arguments(get(0)) + pickle.REDUCE,
}


def _flat(value):
    if type(value) is tuple:
        return [item for inner in value for item in _flat(inner)]
    return [value]


@pytest.mark.parametrize("how", sorted(_SHARED))
def test_inline_array_views_no_bytes_the_object_holds_elsewhere(how):
    """An inline array views the bytearray its bytes were read into only
    when nothing else of the object can hold it: bytes the stream pushes
    again, or whose tuple of arguments it pushes again, are another copy."""
    stream = proto(5, pickle.MARK + _SHARED[how] + pickle.TUPLE)
    restricted = _flat(load(stream))
    trusted = _flat(cpersist.loads(container_bytes(stream), trusted=True))
    assert [type(item) for item in restricted] == [type(item) for item in trusted]
    buffers = (bytearray, np.ndarray)
    for mine, theirs in zip(restricted, trusted):
        assert bytes(mine) == bytes(theirs) if type(mine) in buffers else mine == theirs
    arrays = [item for item in restricted if type(item) is np.ndarray]
    assert arrays and all(a.flags.writeable and a.tolist() == [1.5, -2.0] for a in arrays)
    for arr in arrays:
        assert not any(np.shares_memory(arr, np.frombuffer(other, np.uint8))
                       for other in restricted if type(other) in buffers and other is not arr)


# -- nesting and hashing -----------------------------------------------------------

@pytest.mark.parametrize("into", ["set", "frozenset", "dict key", "none"])
def test_deep_tuple_refused_before_anything_hashes_it(into):
    deep = pickle.EMPTY_TUPLE + pickle.TUPLE1 * 1_000_000
    body = {"set": pickle.EMPTY_SET + pickle.MARK + deep + pickle.ADDITEMS,
            "frozenset": pickle.MARK + deep + pickle.FROZENSET,
            "dict key": pickle.EMPTY_DICT + deep + pickle.NONE + pickle.SETITEM,
            "none": deep}[into]
    with pytest.raises(LimitExceededError, match="max_depth"):
        load(proto(4, body))
    shallow = pickle.EMPTY_TUPLE + pickle.TUPLE1 * 50
    assert len(load(proto(4, pickle.EMPTY_SET + pickle.MARK + shallow + pickle.ADDITEMS))) == 1


def _ints(values):
    return b"".join(integer(v) for v in values)


@pytest.mark.parametrize("into", ["dict", "set", "DICT", "set()"])
def test_colliding_keys_refused(into):
    keys = [k * (2**61 - 1) for k in range(1, 40_001)]  # all hash to 0
    body = {
        "dict": pickle.EMPTY_DICT + pickle.MARK + b"".join(
            integer(k) + pickle.NONE for k in keys) + pickle.SETITEMS,
        "set": pickle.EMPTY_SET + pickle.MARK + _ints(keys) + pickle.ADDITEMS,
        "DICT": pickle.MARK + b"".join(integer(k) + pickle.NONE for k in keys) + pickle.DICT,
        "set()": call(glob("builtins", "set"), pickle.EMPTY_LIST + pickle.MARK + _ints(keys)
                      + pickle.APPENDS),
    }[into]
    with pytest.raises(CorruptFileError, match="collision"):
        load(proto(4, body))
    # Distinct hashes, and a few equal ones, load as they are.
    few = {k * (2**61 - 1) for k in range(1, 9)} | set(range(1000)) | {2.0 ** 61, -1, -2}
    assert load(proto(4, pickle.EMPTY_SET + pickle.MARK + _ints(sorted(few - {2.0 ** 61}))
                      + pickle.BINFLOAT + struct.pack(">d", 2.0 ** 61)
                      + pickle.ADDITEMS)) == few


# -- numpy functions take arrays, not lists ----------------------------------------------

def test_numpy_function_of_nested_lists_refused():
    level = pickle.EMPTY_LIST + pickle.MARK + integer(0) * 2048 + pickle.APPENDS
    for depth in range(1, 4):
        level += put(depth - 1) + pickle.POP + pickle.EMPTY_LIST + pickle.MARK + (
            get(depth - 1) * 2048) + pickle.APPENDS
    with pytest.raises(CorruptFileError, match="arrays only"):
        load(proto(2, call(glob("numpy", "asfortranarray"), level)))


# -- one budget per load ------------------------------------------------------------

@pytest.mark.parametrize("name", ["asfortranarray", "matrix", "MaskedArray"])
def test_constructors_of_a_size_refused(name):
    func = {"asfortranarray": glob("numpy", "asfortranarray"),
            "matrix": glob("numpy", "matrix"),
            "MaskedArray": glob("numpy.ma.core", "MaskedArray")}[name]
    big = tup(s("u1"), tup(integer(30000), integer(30000)))
    args = (integer(0), pickle.NEWFALSE, big) if name == "MaskedArray" else (integer(0), big)
    # The size asked is charged first; MaskedArray is never called.
    expected = UntrustedObjectError if name == "MaskedArray" else LimitExceededError
    with pytest.raises(expected):
        load(proto(2, call(func, *args)))
    small = tup(s("u1"), tup(integer(3)))
    with pytest.raises(cpersist.CpersistError):
        load(proto(2, call(func, *args[:-1], small)))


def test_budget_is_per_load():
    n = 250 << 20
    stream = proto(2, pickle.MARK + _bytearray(n) * 12 + pickle.TUPLE)
    with pytest.raises(LimitExceededError, match="max_alloc_bytes"):
        load(stream)
    # A list of a bytes object: refused, by the budget if it would exceed it.
    with pytest.raises(CorruptFileError, match="list of a bytes"):
        load(proto(2, call(glob("builtins", "list"), call(glob("builtins", "bytes"),
                                                          integer(1 << 20)))))
    with pytest.raises(LimitExceededError, match="max_alloc_bytes"):
        load(proto(2, call(glob("builtins", "list"), call(glob("builtins", "bytes"),
                                                          integer(130 << 20)))))
    # Raising the limit lets a load allocate more.
    assert len(load(proto(2, pickle.MARK + _bytearray(1 << 20) * 3 + pickle.TUPLE),
                    limits=cpersist.Limits(max_alloc_bytes=4 << 20))) == 3
    with pytest.raises(LimitExceededError):
        load(proto(2, pickle.MARK + _bytearray(1 << 20) * 5 + pickle.TUPLE),
             limits=cpersist.Limits(max_alloc_bytes=4 << 20))


def test_int_of_text_bounded_in_digits():
    with pytest.raises(LimitExceededError, match="max_digits"):
        load(proto(2, call(glob("builtins", "int"), s("f" * 8000), integer(16))))
    assert load(proto(2, call(glob("builtins", "int"), s("f" * 100), integer(16)))) == int(
        "f" * 100, 16)


def test_deadline():
    stream = proto(4, pickle.NONE + pickle.DUP * 200_000 + pickle.MARK + pickle.POP_MARK)
    with pytest.raises(LimitExceededError, match="max_seconds"):
        load(stream, limits=cpersist.Limits(max_seconds=0.0))


# -- only what the stream made can be filled in ---------------------------------------

def test_masked_singleton_never_changed():
    masked = np.ma.masked
    before = (masked.shape, masked.dtype, bytes(masked.data))
    state = tup(integer(1), tup(integer(2)), call(glob("numpy", "dtype"), s("i8"),
                                                  pickle.NEWFALSE, pickle.NEWTRUE),
                pickle.NEWFALSE, binbytes(b"\x01" * 16), binbytes(b"\x00\x00"), integer(7))
    through_reconstructor = call(glob("copyreg", "_reconstructor"),
                                 glob("numpy.ma.core", "MaskedConstant"),
                                 glob("numpy.ma.core", "MaskedArray"), pickle.NONE)
    direct = call(glob("numpy.ma.core", "MaskedConstant"))
    for made in (through_reconstructor, direct):
        with pytest.raises(cpersist.CpersistError):
            load(proto(2, made + state + pickle.BUILD))
        assert np.ma.masked is masked
        assert (masked.shape, masked.dtype, bytes(masked.data)) == before
    assert load(proto(2, direct)) is np.ma.masked


def test_array_handed_to_a_call_is_no_longer_filled_in():
    # _reconstruct's empty array, viewed by rebuild_view, then given a state:
    # the view would point at memory the state frees.
    empty = call(glob("numpy._core.multiarray", "_reconstruct"), glob("numpy", "ndarray"),
                 tup(integer(0)), s("b"))
    view = call(glob("cpersist.pickler", "rebuild_view"), get(0), glob("numpy", "matrix"),
                pickle.EMPTY_DICT)
    state = tup(integer(1), tup(integer(4)), call(glob("numpy", "dtype"), s("u1"),
                                                  pickle.NEWFALSE, pickle.NEWTRUE),
                pickle.NEWFALSE, binbytes(b"abcd"))
    with pytest.raises(UntrustedObjectError, match="BUILD"):
        load(proto(2, empty + put(0) + pickle.POP + view + pickle.POP + get(0) + state
                   + pickle.BUILD))


def test_calls_only_of_named_globals():
    with pytest.raises(CorruptFileError, match="no global"):
        load(proto(2, pickle.EMPTY_TUPLE + pickle.TUPLE1 * 3 + pickle.EMPTY_TUPLE
                   + pickle.REDUCE))


# -- what checkpoints and numpy need ---------------------------------------------------------

def test_torch_values_as_torch_load_weights_only():
    torch = pytest.importorskip("torch")
    obj = {"size": torch.Size([2, 3]), "dtypes": [torch.float32, torch.bfloat16, torch.int8],
           "devices": [torch.device("cpu"), torch.device("cuda", 1)],
           "w": torch.ones(2, dtype=torch.bfloat16)}
    raw = pickle.dumps({k: v for k, v in obj.items() if k != "w"}, protocol=2)
    expected = torch.load(io.BytesIO(_torch_save(torch, obj)), weights_only=True)
    out = cpersist.loads(cpersist.dumps(obj), trusted=False)
    assert out["size"] == expected["size"] and type(out["size"]) is torch.Size
    assert out["dtypes"] == expected["dtypes"] and out["devices"] == expected["devices"]
    assert torch.equal(out["w"], obj["w"]) and out["w"].dtype is torch.bfloat16
    assert cpersist.loads(container_bytes(raw), trusted=False)["dtypes"][1] is torch.bfloat16
    with pytest.raises(CorruptFileError, match="torch.Size"):
        load(proto(2, call(glob("torch", "Size"), tup(s("x")))))
    with pytest.raises(UntrustedObjectError, match="torch.float32 .*never call"):
        load(proto(2, call(glob("torch", "float32"))))


def _torch_save(torch, obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


@pytest.mark.parametrize("compress", [0, 3, "zstd", "lz4", "max"])
def test_numpy_string_arrays(compress):
    if not hasattr(np.dtypes, "StringDType"):
        pytest.skip("numpy 1 has no StringDType")
    for dtype in (np.dtypes.StringDType(), np.dtypes.StringDType(na_object=None)):
        values = ["a", "bcd", "é" * 40] + ([None] if hasattr(dtype, "na_object") else [])
        obj = {"s": np.array(values, dtype=dtype), "t": np.array(["x"] * 3, dtype=dtype)}
        data = cpersist.dumps(obj, compress=compress)
        out = cpersist.loads(data, trusted=False)
        trusted = cpersist.loads(data)
        for key in obj:
            assert out[key].dtype == obj[key].dtype == trusted[key].dtype
            assert out[key].tolist() == obj[key].tolist() == trusted[key].tolist()


# -- the dry run of info and verify ------------------------------------------------------

def _defect_streams():
    deep = pickle.EMPTY_TUPLE + pickle.TUPLE1 * 1_000_000
    keys = [k * (2**61 - 1) for k in range(1, 40_001)]
    masked_state = tup(integer(1), tup(integer(2)), call(glob("numpy", "dtype"), s("i8"),
                                                         pickle.NEWFALSE, pickle.NEWTRUE),
                       pickle.NEWFALSE, binbytes(b"\x01" * 16), binbytes(b"\x00\x00"),
                       integer(7))
    return {
        "use after free": proto(2, _bytearray(1 << 20) + put(0) + pickle.POP + call(
            glob("numpy", "ndarray"), tup(integer(1 << 20)), s("u1"), get(0)) + put(1)
            + pickle.POP + _emptied(0) + get(1)),
        "deep tuple": proto(4, pickle.EMPTY_SET + pickle.MARK + deep + pickle.ADDITEMS),
        "masked singleton": proto(2, call(
            glob("copyreg", "_reconstructor"), glob("numpy.ma.core", "MaskedConstant"),
            glob("numpy.ma.core", "MaskedArray"), pickle.NONE) + masked_state + pickle.BUILD),
        "collisions": proto(4, pickle.EMPTY_SET + pickle.MARK + _ints(keys) + pickle.ADDITEMS),
    }


@pytest.mark.parametrize("name", sorted(_defect_streams()))
def test_verify_and_info_say_a_restricted_load_refuses(name, tmp_path):
    from ._fresh import run_cli

    masked = np.ma.masked
    before = (masked.shape, masked.dtype)
    path = tmp_path / "f.cp"
    path.write_bytes(container_bytes(_defect_streams()[name]))
    for tool in (cpersist.verify, cpersist.inspect):
        verdict = tool(path)["restricted_load"]
        assert verdict["accepted"] is False and verdict["refusal"]
    with pytest.raises(cpersist.CpersistError) as info:
        cpersist.load(path, trusted=False)
    assert type(info.value).__name__ in verdict["refusal"]
    assert (masked.shape, masked.dtype) == before
    verified = run_cli("verify", path).stdout
    assert ": OK (" in verified and "a restricted load (trusted=False) refuses it" in verified
    assert "restricted load (trusted=False): refused" in run_cli("info", path).stdout


def test_dry_run_accepts_what_a_restricted_load_does(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "ok.cp"
    obj = {"w": np.arange(1e5), "t": torch.ones(3, 4).t(), "f": np.asfortranarray(
        np.ones((40, 30))), "m": np.ma.array([1, 2], mask=[0, 1]), "mat": np.matrix([[1]])}
    cpersist.dump(obj, path, compress="max")
    assert cpersist.verify(path)["restricted_load"] == {"accepted": True, "refusal": None}
    assert cpersist.inspect(path)["restricted_load"]["accepted"]
    cpersist.load(path, trusted=False)


def test_tensor_item_sizes_known_without_torch():
    pytest.importorskip("torch")
    from cpersist.pickling.torch_dtypes import itemsize_by_name, torch_dtypes

    assert {name: itemsize_by_name(name) for name in torch_dtypes()} == {
        name: dtype.itemsize for name, dtype in torch_dtypes().items()}


def test_dtype_state_only_as_numpy_writes_it():
    # numpy's dtype.__setstate__ reads a 6-item state unchecked and crashes.
    dtype = call(glob("numpy", "dtype"), s("f8"), pickle.NEWFALSE, pickle.NEWTRUE)
    short = tup(integer(3), s(">"), pickle.NONE, integer(-1), integer(-1), integer(0))
    with pytest.raises(CorruptFileError, match="dtype state"):
        load(proto(2, dtype + short + pickle.BUILD))
    numpy_s = tup(integer(3), s(">"), pickle.NONE, pickle.NONE, pickle.NONE, integer(-1),
                  integer(-1), integer(0))
    assert load(proto(2, dtype + numpy_s + pickle.BUILD)) == np.dtype(">f8")


# -- the ways around torch.load(weights_only=True), as they meet this load ---------------

def _storage(shape=None):
    """A stored array of 4 float32 zeros (section 0), its index saying ``shape``."""
    from .hostile.make import storage

    return storage(4, shape=shape)


def _tensor(**view):
    from .hostile.make import tensor

    return tensor(**view)


@pytest.mark.parametrize("where", ["persistent id", "section number"])
def test_refusals_name_the_streams_objects_by_type(where):
    # The repr of lists holding each other 2,048 times, four deep, never ends.
    from .hostile.make import shared_lists, stored

    stream = (shared_lists() + pickle.BINPERSID if where == "persistent id"
              else stored(shared_lists()))
    with pytest.raises(CorruptFileError, match=r"\(a list\)|section a list"):
        cpersist.loads(container_bytes(proto(2, stream), _storage()), trusted=False)


def _dry_run_and_load(data, tmp_path):
    path = tmp_path / "f.cp"
    path.write_bytes(data)
    verdict = cpersist.verify(path)["restricted_load"]
    with pytest.raises(cpersist.CpersistError) as refused:
        cpersist.load(path, trusted=False)
    return verdict, refused.value


def test_dry_run_refuses_a_jax_array_the_load_refuses(tmp_path):
    from .hostile.make import stored

    stream = proto(2, call(glob("cpersist.pickler", "rebuild_jax"), stored(),
                           pickle.EMPTY_DICT))
    verdict, refused = _dry_run_and_load(container_bytes(stream, _storage()), tmp_path)
    assert verdict["accepted"] is False and "shards are not stored arrays" in str(refused)


@pytest.mark.parametrize("view", [{"shape": (1 << 62, 1 << 62), "stride": (0, 0)},
                                  {"shape": (1 << 31,) * 3, "stride": (0,) * 3}])
def test_tensor_of_more_elements_than_torch_counts(view, tmp_path):
    pytest.importorskip("torch")
    data = container_bytes(proto(2, _tensor(**view)), _storage())
    verdict, refused = _dry_run_and_load(data, tmp_path)
    assert verdict["accepted"] is False
    assert "more elements than torch can count" in str(refused)


@pytest.mark.parametrize("name", ["__class__", "numpy", "grad", "__dict__"])
def test_tensor_attributes_hide_nothing_of_the_tensors_own(name, tmp_path):
    torch = pytest.importorskip("torch")
    state = pickle.EMPTY_DICT + s(name) + glob("numpy", "ndarray") + pickle.SETITEM
    data = container_bytes(proto(2, _tensor(kind="parameter", state=state)), _storage())
    verdict, refused = _dry_run_and_load(data, tmp_path)
    assert verdict["accepted"] is False and f"attribute named '{name}'" in str(refused)
    # A trusted load takes the file as it is; a dump's own attributes load restricted.
    assert type(cpersist.load(data and tmp_path / "f.cp")) is torch.nn.Parameter
    param = torch.nn.Parameter(torch.ones(2))
    param.tag = "kept"
    assert cpersist.loads(cpersist.dumps(param), trusted=False).tag == "kept"


def test_uuid_without_its_state_is_the_nil_uuid():
    import uuid

    made = load(proto(2, glob("uuid", "UUID") + pickle.EMPTY_TUPLE + pickle.NEWOBJ))
    assert made == uuid.UUID(int=0) and str(made) == "00000000-0000-0000-0000-000000000000"


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_numpy_pickles_of_ml_dtypes(protocol):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    obj = {"a": np.arange(6).astype(ml_dtypes.bfloat16).reshape(2, 3)[:, ::2],
           "s": np.array(1.5, ml_dtypes.float8_e4m3fn)[()], "d": np.dtype(ml_dtypes.int4)}
    data = container_bytes(pickle.dumps(obj, protocol=protocol))
    out, trusted = cpersist.loads(data, trusted=False), cpersist.loads(data)
    assert out["d"] == trusted["d"] == obj["d"]
    for key in ("a", "s"):
        assert type(out[key]) is type(trusted[key]) and out[key].dtype == obj[key].dtype
        assert out[key].tobytes() == trusted[key].tobytes() == obj[key].tobytes()
    # Only ml_dtypes' types of the table, in native byte order, stand for dtypes.
    swapped = pickle.dumps(np.zeros(2, np.dtype(ml_dtypes.bfloat16).newbyteorder()), 2)
    with pytest.raises(CorruptFileError, match="native byte order"):
        cpersist.loads(container_bytes(swapped), trusted=False)
    # numpy's one bfloat16 dtype (numpy.dtype(..., copy=True) gives it back) is
    # not what that BUILD changed.
    assert np.dtype(ml_dtypes.bfloat16).isnative and np.dtype(ml_dtypes.bfloat16).str == "<V2"
    with pytest.raises(UntrustedObjectError):
        cpersist.loads(container_bytes(proto(2, glob("ml_dtypes", "finfo"))), trusted=False)


@pytest.mark.parametrize("protocol", [2, 5])
def test_empty_arrays_keep_their_strides(protocol):
    for arr in (np.zeros((0, 3), ">i4"), np.zeros((0, 3), "c16", order="F"),
                np.zeros((2, 0, 4), "u1")):
        data = container_bytes(pickle.dumps(arr, protocol=protocol))
        out, trusted = cpersist.loads(data, trusted=False), cpersist.loads(data)
        assert (out.shape, out.strides, out.dtype) == (trusted.shape, trusted.strides,
                                                       trusted.dtype)
        assert out.flags.writeable == trusted.flags.writeable


@pytest.mark.parametrize("protocol", [2, 5])
def test_padding_of_structured_items_copied_not_left_uninitialised(protocol):
    # numpy copies a structured array field by field: the bytes between fields
    # of its copy are whatever its new memory held.
    padded = np.dtype([("x", "u1"), ("y", "<i8")], align=True)
    items = np.frombuffer(bytes(range(96)), padded).reshape(2, 3)
    for arr in (items, items.T, np.asfortranarray(items)):
        for data in (container_bytes(pickle.dumps(arr, protocol=protocol)),
                     cpersist.dumps(arr, compress="max")):
            out = cpersist.loads(data, trusted=False)
            assert out.dtype == padded and out.strides == cpersist.loads(data).strides
            assert out.tobytes(order="A") == arr.tobytes(order="A")


def test_string_arrays_with_a_nan_for_na_and_constants():
    strings = np.array(["a", np.nan, "b"], dtype=np.dtypes.StringDType(na_object=np.nan))
    out = cpersist.loads(cpersist.dumps({"s": strings, "index": (Ellipsis, 1),
                                         "flag": NotImplemented}), trusted=False)
    assert out["s"].dtype == strings.dtype and repr(out["s"].tolist()) == "['a', nan, 'b']"
    assert out["index"] == (Ellipsis, 1) and out["flag"] is NotImplemented


@pytest.mark.parametrize("fill", [pickle.MARK + pickle.BININT1 + b"\x01" + pickle.APPENDS,
                                  pickle.EMPTY_DICT + pickle.BUILD], ids=["APPENDS", "BUILD"])
def test_none_is_no_object_the_stream_may_change(fill, tmp_path):
    """None is in no table of the objects the stream made: changing it is
    refused as changing any object it did not make, by the load and the dry
    run alike."""
    data = container_bytes(proto(2, pickle.NONE + fill))
    verdict, refused = _dry_run_and_load(data, tmp_path)
    assert isinstance(refused, UntrustedObjectError)
    assert "tried to change it" in str(refused) and "tried to change it" in verdict["refusal"]


@pytest.mark.parametrize("state", [{"int": "x"}, {"int": 1 << 128}, {"int": -1}, {"int": 1, "x": 2},
                                   {"int": 1, "is_safe": "yes"}, {"hex": "0" * 32}])
def test_a_uuid_takes_only_the_state_its_own_pickle_gives(state, tmp_path):
    """``UUID.__setstate__`` takes any ``int`` as it is; a restricted load
    refuses a state no UUID pickles, and loads those that one does."""
    import uuid

    for safe in uuid.SafeUUID:
        made = uuid.UUID(int=7, is_safe=safe)
        loaded = cpersist.loads(cpersist.dumps(made), trusted=False)
        assert loaded == made and loaded.is_safe is safe
    stream = proto(2, glob("uuid", "UUID") + pickle.EMPTY_TUPLE + pickle.NEWOBJ
                   + pickle.EMPTY_DICT
                   + b"".join(s(k) + (integer(v) if type(v) is int else s(str(v)))
                              + pickle.SETITEM for k, v in state.items())
                   + pickle.BUILD)
    verdict, refused = _dry_run_and_load(container_bytes(stream), tmp_path)
    assert verdict["accepted"] is False and "a UUID's state" in str(refused)
