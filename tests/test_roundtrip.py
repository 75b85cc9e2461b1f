"""Round trips: every dtype, layout, array subclass and container must come
back exactly (bytes, dtype with byte order, shape, memory order, type), under
every codec, to and from every kind of target."""

import io
import os
import tempfile
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cpersist
from cpersist.container import ContainerReader

from .conftest import (COMPRESSIONS, TARGETS, assert_same, every_array_a_section, make_matrix,
                       random_array, roundtrip, roundtrip_bytes)

# -- dtypes ------------------------------------------------------------------

NESTED = np.dtype([
    ("id", ">i8"),
    ("pos", "<f4", (3,)),
    ("inner", [("flag", "?"), ("name", "S3"), ("when", ">M8[ms]"), ("grid", "<i2", (2, 2))]),
    ("label", "<U2"),
])

ALIGNED_PAIR = np.dtype([("x", "u1"), ("y", "<i4")], align=True)
DTYPES = [
    "?", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8",
    "f2", "f4", "f8", np.longdouble, "c8", "c16", np.clongdouble,
    ">i2", ">i4", ">i8", ">u2", ">u8", ">f2", ">f4", ">f8", ">c8", ">c16",
    "<i4", "<f8",
    "M8[ns]", "M8[D]", ">M8[s]", "m8[us]", ">m8[h]", "M8[Y]",
    "S1", "S7", "U1", "U5", ">U3", "V6",
    [("a", "<i4"), ("b", ">f8")],
    NESTED,
    np.dtype([("a", "u1"), ("b", "<f8"), ("c", "i2")], align=True),
    # align=True, which the .npy descriptor does not record: on nested
    # structs, a sub-array of them, a packed struct inside, a title
    np.dtype([("a", "u1"), ("s", ALIGNED_PAIR), ("t", ALIGNED_PAIR, (2,)),
              ("p", [("x", "u1"), (">y", ">i4")])], align=True),
    [("a", "u1"), ("s", ALIGNED_PAIR)],
    np.dtype({"names": ["v", "w"], "formats": ["u1", "<f8"], "titles": ["the value", None]},
             align=True),
    np.dtype({"names": ["x", "y"], "formats": ["<i2", ">u4"], "offsets": [0, 4],
              "itemsize": 12}),
    np.dtype({"names": ["v"], "formats": ["<f8"], "titles": ["the value"]}),
    # overlapping and out-of-order fields: the .npy descriptor cannot say them
    np.dtype({"names": ["whole", "low"], "formats": ["<u4", "<u2"], "offsets": [0, 0]}),
    np.dtype({"names": ["b", "a"], "formats": [">i4", "<i2"], "offsets": [4, 0],
              "itemsize": 8}),
    [("s", [("a", "i1"), ("b", ">f4")], (2, 2))],  # sub-array of structs
    [("é", "<i4")],  # a non-ASCII field name
    ("<i4", (2, 3)),  # a sub-array dtype: numpy folds it into the shape
    object,
    [("n", "<i4"), ("o", object)],
]


def _dtype_id(dtype):
    dt = np.dtype(dtype)
    return dt.str if not dt.names else "struct-" + "-".join(dt.names)


def _arrays_of(dtype):
    base = random_array(dtype, (6, 5), seed=1)
    return {
        "c": base,
        "f": random_array(dtype, (5, 4, 3), order="F", seed=2),
        "view": base[::2, ::-2],
        "zero_d": base[1, 2, ...],
        "empty": np.zeros((0, 3), dtype=dtype),
        "empty_f": np.zeros((2, 0, 4), dtype=dtype, order="F"),
        "one": base[:1, :1],
    }


#: Raw sections, plain chunks, and the codecs that look at the item size
#: (Blosc's shuffle, zstd-auto's byte grouping): the write paths a dtype can break.
TYPESIZE_CODECS = [0, "zstd", "zstd-auto", "blosc:lz4"]
#: One dtype of each item size class, for the codecs that see only bytes.
ITEMSIZES = ["?", ">i2", "<f4", ">f8", "c16", "U5", NESTED, object]


@pytest.mark.parametrize("compress", TYPESIZE_CODECS)
@pytest.mark.parametrize("dtype", DTYPES, ids=[_dtype_id(d) for d in DTYPES])
def test_every_dtype_round_trips(dtype, compress, rt):
    obj = _arrays_of(dtype)
    out = rt(obj, compress=compress, chunk_size=64)
    assert_same(obj, out)


@pytest.mark.parametrize("compress", COMPRESSIONS)
@pytest.mark.parametrize("dtype", ITEMSIZES, ids=[_dtype_id(d) for d in ITEMSIZES])
def test_every_codec_round_trips_every_item_size(dtype, compress, rt):
    obj = _arrays_of(dtype)
    out = rt(obj, compress=compress, chunk_size=64)
    assert_same(obj, out)


@pytest.mark.parametrize("compress", [0, "zstd"])
def test_equal_dtypes_keep_their_own_align_flag(compress, rt):
    """An aligned struct and the same layout made without align=True compare
    equal (and may hash alike): each array must come back with its own."""
    aligned = np.dtype([("x", "u1"), ("y", "<i4")], align=True)
    plain = np.dtype({"names": ["x", "y"], "formats": ["u1", "<i4"], "offsets": [0, 4],
                      "itemsize": 8})
    assert aligned == plain and not plain.isalignedstruct
    obj = [random_array(dt, (20_000,), seed=i) for i, dt in enumerate([aligned, plain] * 2)]
    out = rt(obj, compress=compress)
    assert_same(obj, out)
    assert [a.dtype.isalignedstruct for a in out] == [True, False, True, False]


# rt's "bytes" mode reads memory maps from a file too: one mode is enough.
@pytest.mark.parametrize("rt", ["file"], indirect=True)
@pytest.mark.parametrize("dtype", ["f8", ">i4", NESTED, "U3",
                                   np.dtype([("a", "u1"), ("s", ALIGNED_PAIR)], align=True)],
                         ids=_dtype_id)
@pytest.mark.usefixtures("sections")
def test_dtype_mmap(dtype, rt):
    obj = _arrays_of(dtype)
    out = rt(obj, "path", load_kwargs={"mmap_mode": "r"})
    assert_same(obj, out, mmap=True)
    assert type(out["c"]) is np.memmap
    assert type(out["f"]) is np.memmap and out["f"].flags.f_contiguous


# -- memory layouts and chunking ---------------------------------------------

def _layouts():
    a3 = random_array("<f8", (9, 8, 7), seed=3)
    f3 = np.asfortranarray(a3)
    wide = random_array(">i4", (3, 5000), seed=4)  # one row is 20000 bytes
    small = random_array("f8", (300,), seed=5)
    return {
        "c3": a3,
        "f3": f3,
        "f2": np.asfortranarray(a3[0]),
        "step_slices": a3[::2, 1::3],
        "transpose": a3.transpose(1, 0, 2),
        "transpose_f_like": a3.T,  # F-contiguous view of a C array
        "negative_steps": a3[::-1, :, ::-2],
        "negative_rows": a3[::-1],
        "inner_strided_only": a3[:, :, ::2],
        "outer_strided_only": a3[::3],
        "middle_strided_only": a3[:, ::2, :],
        "column": a3[:, 3, :],
        "f_view": f3[1:-1, ::2],
        "broadcast": np.broadcast_to(small[:5], (4, 3, 5)),
        "huge_row_strided": wide[:, ::3],
        "huge_row_contiguous_rows": wide[::2],
        "huge_row_reversed": wide[::-1, ::-1],
        "one_d_big": small,
        "one_d_strided": small[::7],
        "zero_d": np.array(2.5),
        "zero_size_1d": np.zeros((0,), ">f8"),
        "zero_size_3d": np.zeros((3, 0, 2), "u2"),
        "zero_size_f": np.zeros((0, 4, 5), "c8", order="F"),
        "zero_size_view": np.zeros((4, 0, 3))[::2].transpose(2, 0, 1),
        "structured_view": random_array(NESTED, (20, 3), seed=6)[::3, ::-1],
        # Its items are numpy str_ scalars as long as their text: the first, '', is 0 bytes.
        "strings_reversed": np.array(["", "a", "bc", ""] * 30, "<U2")[::-1],
    }


LAYOUTS = _layouts()


# Chunks of 7 bytes split every item: raw sections and Blosc's shuffle (off
# where a chunk is not whole items) are what that can break; plain codecs
# see the same bytes at every chunk size.
@pytest.mark.parametrize("compress, chunk_size", [
    (c, n) for c in (0, "zstd", "blosc:lz4", "lz4") for n in (7, 1000, 4099, None)
    if n != 7 or c in (0, "blosc:lz4")])
def test_layouts_and_chunk_sizes(compress, chunk_size, rt):
    out = rt(LAYOUTS, compress=compress, chunk_size=chunk_size)
    assert_same(LAYOUTS, out)


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_layout_alone(name, rt):
    arr = LAYOUTS[name]
    out = rt(arr, compress="blosc:zstd", chunk_size=1000)
    assert_same(arr, out)
    if arr.size:
        # the loaded array owns its memory, the view's base is not dragged along
        assert out.nbytes == arr.nbytes


@pytest.mark.parametrize("compress", [0, "zlib"])
def test_array_larger_than_one_chunk_is_split(compress, tmp_path):
    arr = random_array("f8", (50, 40), seed=7)[:, ::2]  # 8000 bytes, non-contiguous
    path = tmp_path / "big.cp"
    cpersist.dump({"a": arr}, path, compress=compress, chunk_size=1000)
    with open(path, "rb") as file:
        reader = ContainerReader(file, str(path))
        sizes = [chunk.raw_length for s in reader.sections if s.meta.get("kind") == "array"
                 for chunk in s.chunks]
    assert sum(sizes) == arr.nbytes
    assert len(sizes) >= 8 and max(sizes) <= 1000
    assert all(size % 8 == 0 for size in sizes)  # chunks end on element boundaries
    assert_same({"a": arr}, cpersist.load(path))


@pytest.mark.parametrize("chunk_size", [1, 7, 8, 9])
def test_chunk_smaller_than_an_item(chunk_size, rt):
    obj = {"a": random_array(NESTED, (4, 3), seed=8), "b": random_array("c16", 10)[::3]}
    assert_same(obj, rt(obj, compress="blosc:blosclz", chunk_size=chunk_size))


@pytest.mark.parametrize("chunk_size", [7, 1000, None])
@pytest.mark.parametrize("compress", [0, "blosc:zstd", "zlib"])
def test_unaligned_read_only_and_huge_items(compress, chunk_size, rt):
    buffer = np.arange(20001, dtype="u1").tobytes()
    unaligned = np.frombuffer(buffer, dtype=">f8", offset=1, count=2000)
    assert not unaligned.flags.aligned and not unaligned.flags.writeable
    read_only = np.arange(100.0).reshape(10, 10)
    read_only.flags.writeable = False
    obj = {"unaligned": unaligned, "unaligned_view": unaligned.reshape(40, 50)[:, ::3],
           "read_only": read_only[::2], "huge_items": np.zeros(3, "V5000"),
           "huge_items_view": random_array("V2500", (2, 3), seed=30)[:, ::2]}
    out = rt(obj, compress=compress, chunk_size=chunk_size)
    assert_same(obj, out)
    assert out["unaligned"].flags.aligned and out["read_only"].flags.writeable


# -- array subclasses --------------------------------------------------------

def _subclass_cases():
    data = random_array("f8", (4, 5), seed=9)
    structured = random_array([("a", "<i4"), ("b", ">f8")], (6,), seed=10)
    return {
        "matrix": make_matrix(data),
        "matrix_f": make_matrix(np.asfortranarray(data)),
        "masked_nomask": np.ma.MaskedArray(data),
        "masked": np.ma.MaskedArray(data, mask=data > 0.5),
        "masked_hard": np.ma.MaskedArray(data, mask=data < 0.2, hard_mask=True),
        "masked_fill": np.ma.MaskedArray(data, mask=data > 0.9, fill_value=-7.25),
        "masked_int_fill": np.ma.MaskedArray(np.arange(6, dtype=">i2"), mask=[0, 1] * 3,
                                             fill_value=42),
        "masked_structured": np.ma.MaskedArray(
            structured, mask=[(i % 2, i % 3 == 0) for i in range(6)]),
        "masked_view": np.ma.MaskedArray(data, mask=data > 0.5)[::2, ::-1],
        "masked_f": np.ma.MaskedArray(np.asfortranarray(data), mask=np.asfortranarray(
            data > 0.3)),
        "masked_object": np.ma.MaskedArray(np.array(["a", None, 3], dtype=object),
                                           mask=[0, 1, 0]),
        "recarray": np.rec.array(structured),
        "recarray_view": np.rec.array(structured)[::2],
        "masked_constant": np.ma.masked,
    }


SUBCLASSES = _subclass_cases()


# A subclass's parts are arrays like any other once pickled: raw, plain
# chunks and shuffled chunks cover how they are written.
@pytest.mark.parametrize("compress", [0, "zstd", "blosc:lz4"])
@pytest.mark.parametrize("name", sorted(SUBCLASSES))
def test_subclasses(name, compress, rt):
    obj = SUBCLASSES[name]
    out = rt({"x": obj, "y": [obj]}, compress=compress, chunk_size=100)
    assert_same({"x": obj, "y": [obj]}, out)
    assert out["x"] is out["y"][0]
    if obj is np.ma.masked:
        assert out["x"] is np.ma.masked  # the singleton loads as itself


def test_masked_array_behaviour_after_load(rt):
    arr = np.ma.MaskedArray([1.0, 2.0, 3.0], mask=[0, 1, 0], fill_value=-1.0, hard_mask=True)
    out = rt(arr, compress="zlib")
    assert out.filled().tolist() == [1.0, -1.0, 3.0]
    out[1] = 99.0  # hard mask: a masked value cannot be unmasked by assignment
    assert out.mask.tolist() == [False, True, False]
    soft = rt(np.ma.MaskedArray([1.0, 2.0], mask=[0, 1]))
    soft[1] = 5.0
    assert soft.mask.tolist() == [False, False]


def test_matrix_stays_a_matrix(rt):
    m = make_matrix([[1.0, 2.0], [3.0, 4.0]])
    out = rt(m)
    assert type(out) is np.matrix
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        product = out * out
    assert type(product) is np.matrix and product.tolist() == [[7.0, 10.0], [15.0, 22.0]]
    assert out[0].shape == (1, 2)  # matrix indexing keeps two dimensions


def test_recarray_fields_as_attributes(rt):
    rec = np.rec.array([(1, 2.0), (3, 4.0)], dtype=[("x", "<i4"), ("y", ">f8")])
    out = rt(rec, compress="lz4")
    assert type(out) is np.recarray
    assert out.x.tolist() == [1, 3] and out.y.dtype == np.dtype(">f8")
    assert type(out[0]) is np.record


def test_memmap_input_comes_back_as_ndarray(tmp_path, rt):
    source = np.memmap(tmp_path / "src.bin", dtype=">f4", mode="w+", shape=(5, 4), order="F")
    source[...] = np.arange(20, dtype=">f4").reshape(5, 4)
    source.flush()
    obj = {"whole": source, "view": source[1:, ::2]}
    out = rt(obj, compress=0)
    assert type(out["whole"]) is np.ndarray and type(out["view"]) is np.ndarray
    assert_same(obj, out)
    del source, obj


class Tagged(np.ndarray):
    """A user subclass that pickles like ndarray and keeps an attribute."""

    def __array_finalize__(self, obj):
        self.tag = getattr(obj, "tag", None)


def make_custom(data, note):
    out = np.asarray(data).view(CustomReduce)
    out.note = note
    return out


class CustomReduce(np.ndarray):
    """A user subclass with its own pickling, which cpersist must respect."""

    def __reduce__(self):
        return make_custom, (np.asarray(self), getattr(self, "note", None))


@pytest.mark.parametrize("compress", [0, "zstd"])
def test_user_subclasses(compress, rt):
    tagged = random_array("f4", (30, 40), seed=20).view(Tagged)
    tagged.tag = {"unit": "K"}
    custom = make_custom(random_array(">i8", (50, 3), order="F", seed=21), "hello")
    out = rt({"tagged": tagged, "custom": custom, "again": custom}, compress=compress,
             chunk_size=1000)
    assert type(out["tagged"]) is Tagged and out["tagged"].tag == {"unit": "K"}
    assert_same(tagged, out["tagged"])
    assert type(out["custom"]) is CustomReduce and out["custom"].note == "hello"
    assert_same(custom.view(np.ndarray), out["custom"].view(np.ndarray))
    assert out["again"] is out["custom"]


@pytest.mark.parametrize("compress", [0, "lz4"])
def test_arrays_inside_object_arrays(compress, rt):
    shared = random_array("f8", (40, 30), seed=22)
    ragged = np.empty(4, dtype=object)
    ragged[:] = [shared, np.arange(5, dtype=">u2"), None, shared[::2]]
    grid = np.empty((2, 2), dtype=object, order="F")
    grid[0, 0], grid[1, 1] = shared, "text"
    out = rt({"ragged": ragged, "grid": grid, "shared": shared}, compress=compress,
             chunk_size=512)
    assert_same({"ragged": ragged, "grid": grid, "shared": shared}, out)
    assert out["ragged"][0] is out["shared"] is out["grid"][0, 0]
    assert out["grid"].flags.f_contiguous


# -- objects mixing arrays and Python values ---------------------------------

class Point:
    """A plain class instance holding arrays."""

    def __init__(self, name, coords):
        self.name = name
        self.coords = coords


class Leaf:
    """A fitted scikit-learn-like sub-estimator."""

    def __init__(self, depth, seed):
        self.max_depth = depth
        self.random_state = seed

    def fit(self, n_features):
        rng = np.random.default_rng(self.random_state)
        self.feature_ = rng.integers(0, n_features, 31).astype(np.intp)
        self.threshold_ = rng.standard_normal(31)
        self.value_ = rng.standard_normal((31, 1, 3))
        self.n_node_samples_ = np.asfortranarray(rng.integers(1, 100, (31, 2)))
        return self


class Forest:
    """A fitted scikit-learn-like ensemble: arrays plus a list of sub-estimators."""

    def __init__(self, n_estimators=5, max_depth=4):
        self.n_estimators = n_estimators
        self.max_depth = max_depth

    def fit(self, n_features=7):
        self.classes_ = np.array(["cat", "dog", "eel"], dtype=object)
        self.n_features_in_ = n_features
        self.feature_names_in_ = np.array([f"f{i}" for i in range(n_features)], dtype=object)
        self.feature_importances_ = np.linspace(0, 1, n_features)
        self.estimators_ = [Leaf(self.max_depth, i).fit(n_features)
                            for i in range(self.n_estimators)]
        self.oob_score_ = np.float64(0.875)
        self.params_ = {"criterion": "gini", "bootstrap": True, "weights": None}
        return self


def mixed_object():
    shared = random_array("f4", (10, 3), seed=11)
    return {
        "shared_a": shared,
        "shared_b": shared,
        "list": [1, 2.5, "three", None, True, b"bytes", random_array(">i2", (4,), seed=12)],
        "tuple": (random_array("c8", (2, 2), seed=13), (np.int16(-3), np.float16(0.5))),
        "set": {1, "a", (2, 3)},
        "frozenset": frozenset({4.5}),
        "nested": {"deeper": {"arr": random_array("U4", (3,), seed=14), "n": 10 ** 30}},
        "point": Point("origin", random_array("f8", (3,), seed=15)),
        "scalars": [np.float64("nan"), np.datetime64("2021-03-04T05:06"), np.bool_(True),
                    np.str_("s"), np.bytes_(b"b"), np.timedelta64(3, "h"), np.uint64(2**63)],
        "dtypes": [np.dtype(">i4"), NESTED, np.dtype("M8[us]")],
        "forest": Forest().fit(),
        "empty": [],
        "nan": float("nan"),
        "complex": 1 - 2j,
        "bytearray": bytearray(b"\x00\x01"),
        "range": range(3, 10, 2),
    }


# Every codec through a seekable file, a pipe (streamed writes) and dumps;
# every target through raw and compressed sections: targets and codecs meet
# only in how sections are written and read, which these cover.
TARGET_CODEC_PAIRS = sorted(
    {(how, c) for how in ("path", "pipe", "bytes") for c in COMPRESSIONS}
    | {(how, c) for how in TARGETS for c in (0, "zstd")}, key=str)


@pytest.mark.parametrize("how, compress", TARGET_CODEC_PAIRS)
def test_mixed_object_every_target_and_codec(how, compress, tmp_path):
    obj = mixed_object()
    if how == "bytes":
        out = roundtrip_bytes(obj, compress=compress, chunk_size=256)
    else:
        out = roundtrip(obj, how, tmp_path, compress=compress, chunk_size=256)
    assert_same(obj, out)
    assert out["shared_a"] is out["shared_b"]


@pytest.mark.parametrize("how", ["path", "pathlib", "file"])
@pytest.mark.usefixtures("sections")
def test_mixed_object_mmap(how, tmp_path):
    obj = mixed_object()
    out = roundtrip(obj, how, tmp_path, load_kwargs={"mmap_mode": "r"})
    assert_same(obj, out, mmap=True)
    assert out["shared_a"] is out["shared_b"]
    assert type(out["shared_a"]) is np.memmap
    assert type(out["forest"].estimators_[2].n_node_samples_) is np.memmap


@pytest.mark.parametrize("container", [list, tuple, set, frozenset, dict])
def test_top_level_containers(container, rt):
    arrays = [random_array("i8", (3,), seed=i) for i in range(3)]
    if container in (set, frozenset):
        obj = container([1, "two", (3.0, None)])
    elif container is dict:
        obj = {i: a for i, a in enumerate(arrays)}
    else:
        obj = container(arrays + ["tail"])
    assert_same(obj, rt(obj, compress=True))


def test_sklearn_like_estimator(rt):
    forest = Forest(n_estimators=12).fit(n_features=9)
    out = rt(forest, "path", compress=("zstd", 9), chunk_size=512)
    assert type(out) is Forest and all(type(e) is Leaf for e in out.estimators_)
    assert_same(forest, out)
    assert out.estimators_[3].n_node_samples_.flags.f_contiguous


def test_real_sklearn_estimator(rt):
    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.preprocessing import StandardScaler

    X, y = make_classification(n_samples=200, n_features=6, random_state=0)
    model = RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0).fit(X, y)
    scaler = StandardScaler().fit(X)
    out_model, out_scaler = rt((model, scaler), compress="blosc:zstd")
    assert (out_model.predict_proba(X) == model.predict_proba(X)).all()
    assert_same(scaler.scale_, out_scaler.scale_)


@pytest.mark.parametrize("compress", [0, "zstd"])
@pytest.mark.parametrize("obj", [
    None, 0, "text", b"", [], {}, {"a": [1, 2, {"b": (3, None)}]}, Point("p", [1, 2]),
    np.float32(1.5), np.dtype("<U3"),
], ids=lambda obj: "Point" if isinstance(obj, Point) else repr(obj))
def test_objects_without_arrays(obj, compress, rt):
    assert_same(obj, rt(obj, compress=compress))


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_pickle_protocols(protocol, rt):
    obj = mixed_object()
    out = rt(obj, protocol=protocol, compress="lz4")
    assert_same(obj, out)
    assert out["shared_a"] is out["shared_b"]


@pytest.mark.parametrize("compress", [0, "zstd"])
def test_dtype_metadata_is_kept(compress, rt):
    with_meta = np.dtype("<f8", metadata={"unit": "m"})
    obj = {
        "top": np.arange(3000.0).astype(with_meta).reshape(50, 60, order="F"),
        "field": np.zeros(4, dtype=[("x", with_meta), ("n", ">i2", (2,))]),
        "masked": np.ma.MaskedArray(np.ones(3, with_meta), mask=[0, 1, 0]),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "metadata is not saved" warning
        out = rt(obj, compress=compress, load_kwargs={"trusted": False})
    assert_same(obj, out)
    assert out["top"].dtype.metadata == {"unit": "m"}


def test_views_of_one_base_are_independent_copies(rt):
    base = np.arange(10.0)
    out = rt({"a": base[:5], "b": base[3:]})
    out["a"][3] = -1.0
    assert out["b"][0] == 3.0  # the two views were stored separately


@pytest.mark.parametrize("size", [6, 30000])  # kept in the pickle stream, or a section
@pytest.mark.parametrize("compress", [0, "zlib"])
def test_loaded_arrays_are_writable(compress, size, rt):
    out = rt({"a": np.arange(float(size)).reshape(2, -1), "z": np.zeros(0)}, compress=compress)
    assert out["a"].flags.writeable and out["z"].flags.writeable
    out["a"][0, 0] = 42.0
    assert out["a"][0, 0] == 42.0


# -- levels ------------------------------------------------------------------

# A level reaches the codec's encoder only: whether the dump is then read
# from a file or from bytes is covered by the tests above. "max" has one
# way of encoding whatever its level.
@pytest.mark.parametrize("rt", ["file"], indirect=True)
@pytest.mark.parametrize("codec, level", [
    (codec, level) for codec in cpersist.available_codecs() for level in (1, 3, 9)
    if codec != "max" or level == 9])
def test_codec_levels(codec, level, rt):
    obj = {"smooth": np.linspace(0, 1, 3000).reshape(60, 50),
           "ints": np.arange(5000, dtype=">i4") % 17,
           "view": random_array(NESTED, (30,), seed=16)[::-2]}
    assert_same(obj, rt(obj, compress=(codec, level), chunk_size=4099))


@pytest.mark.parametrize("compress", [1, 2, 5, 9, True, ("zlib", 0), ("blosc:lz4", 1), False])
def test_integer_levels_and_shorthands(compress, rt):
    obj = {"a": np.tile(np.arange(100, dtype="f8"), 20), "b": "x" * 1000}
    assert_same(obj, rt(obj, compress=compress, chunk_size=1000))


# -- property test -----------------------------------------------------------

PROPERTY_DTYPES = ["?", "u1", ">i2", "<i8", ">f4", "f2", "c16", ">M8[s]", "S3", "<U2",
                   [("a", ">i2"), ("b", "f4", (2,))], NESTED]


@st.composite
def array_views(draw):
    dtype = draw(st.sampled_from(PROPERTY_DTYPES))
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 7), min_size=ndim, max_size=ndim)))
    order = draw(st.sampled_from("CF"))
    arr = random_array(dtype, shape, order=order, seed=draw(st.integers(0, 2**16)))
    index = []
    for n in shape:
        start = draw(st.integers(-n - 1, n + 1)) if n else 0
        stop = draw(st.one_of(st.none(), st.integers(-n - 1, n + 1)))
        step = draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
        index.append(slice(start, stop, step))
    view = arr[(*index, Ellipsis)]  # the Ellipsis keeps a 0-d array an array
    if view.ndim > 1 and draw(st.booleans()):
        view = view.transpose(draw(st.permutations(range(view.ndim))))
    return view


@settings(max_examples=100)
@given(arr=array_views(),
       compress=st.sampled_from(COMPRESSIONS),
       chunk_size=st.sampled_from([1, 7, 64, 1000, None]))
def test_property_random_views(arr, compress, chunk_size):
    buf = io.BytesIO()
    cpersist.dump({"x": arr, "y": arr}, buf, compress=compress, chunk_size=chunk_size)
    buf.seek(0)
    out = cpersist.load(buf)
    assert_same({"x": arr, "y": arr}, out)
    assert out["x"] is out["y"]


@settings(max_examples=50)
@given(arr=array_views(), chunk_size=st.sampled_from([3, 100, None]), trusted=st.booleans())
def test_property_random_views_mmap(arr, chunk_size, trusted):
    masked = np.ma.MaskedArray(arr, mask=np.ones(arr.shape, bool))
    obj = {"x": arr, "masked": masked}
    with tempfile.TemporaryDirectory() as tmp, every_array_a_section():
        path = os.path.join(tmp, "p.cp")
        cpersist.dump(obj, path, chunk_size=chunk_size)
        out = cpersist.load(path, mmap_mode="r", trusted=trusted)
        assert_same(obj, out, mmap=True)
        assert type(out["x"]) is (np.memmap if arr.size else np.ndarray)
        del out


def test_no_warnings_on_plain_round_trip(rt):
    obj = mixed_object()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_same(obj, rt(obj, "path", compress=3))


def test_arrays_read_side_by_side_are_read_once(tmp_path, monkeypatch):
    """The array sections read ahead on the pool are read once, whatever
    order the stream asks for them in; zero-size ones (nothing to read)
    asked for after all the others included."""
    from cpersist.pickling import read

    calls = []
    real = read._read_ahead
    monkeypatch.setattr(read, "_read_ahead", lambda *args: calls.append(1) or real(*args))
    obj = [np.arange(20000.0), np.zeros((0, 3)), np.arange(30000), np.ones(9000, np.float32),
           np.zeros(0, np.int8)]
    cpersist.dump(obj, tmp_path / "a.cp")  # raw: every array a section
    back = cpersist.load(tmp_path / "a.cp", n_threads=2)
    assert_same(obj, back)
    assert calls == [1]
