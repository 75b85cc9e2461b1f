"""The behaviour of ``dump`` and ``load``: arguments, memory mapping, atomic
writes, errors on bad files, determinism, the file layout and restricted
loading."""

import gc
import gzip
import io
import json
import os
import pickle
import socket
import struct
import tempfile
import warnings

import joblib
import numpy as np
import pytest

import cpersist
from cpersist.container import FORMAT_MAJOR, FORMAT_MINOR, MAGIC, TRAILER, ContainerReader
from cpersist.container.buffers import BufferPool
from cpersist.container.layout import ALIGN, END_MAGIC

from .conftest import (COMPRESSIONS, _Thread, assert_same, make_matrix, pipe_bytes, random_array,
                       roundtrip)


def sections_of(path):
    """The sections of a cpersist file, read with the container's reader."""
    with open(path, "rb") as file:
        reader = ContainerReader(file, str(path))
        return reader.sections, reader.root


def big(seed=0, shape=(200, 100), dtype="f8", order="C"):
    """An array large enough to get a section of its own in any file."""
    return random_array(dtype, shape, order=order, seed=seed)


def no_stray_files(directory, expected):
    names = sorted(os.listdir(directory))
    assert names == sorted(expected), names
    assert not [n for n in names if n.endswith(".cpersist-tmp")]


# -- dump: targets and return value ------------------------------------------

def test_dump_returns_the_name(tmp_path):
    obj = {"a": big()}
    assert cpersist.dump(obj, str(tmp_path / "a.cp")) == [str(tmp_path / "a.cp")]
    assert cpersist.dump(obj, tmp_path / "b.cp") == [str(tmp_path / "b.cp")]
    with open(tmp_path / "c.cp", "wb") as file:
        assert cpersist.dump(obj, file) == [str(tmp_path / "c.cp")]
    assert cpersist.dump(obj, io.BytesIO()) == []
    no_stray_files(tmp_path, ["a.cp", "b.cp", "c.cp"])
    data = (tmp_path / "a.cp").read_bytes()
    assert (tmp_path / "b.cp").read_bytes() == data == (tmp_path / "c.cp").read_bytes()


def test_dump_relative_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cpersist.dump([1, big()], "rel.cp") == ["rel.cp"]
    assert_same([1, big()], cpersist.load("rel.cp"))
    no_stray_files(tmp_path, ["rel.cp"])


def test_dump_overwrites_an_existing_file(tmp_path):
    path = tmp_path / "x.cp"
    cpersist.dump({"old": big(1)}, path)
    cpersist.dump({"new": big(2)}, path, compress=3)
    assert_same({"new": big(2)}, cpersist.load(path))
    no_stray_files(tmp_path, ["x.cp"])


@pytest.mark.parametrize("compress", [0, "blosc:zstd"])
def test_socket_target_and_source(compress):
    """A socket (unbuffered, non-seekable) as dump target and load source."""
    obj = {"a": big(shape=(400, 300)), "b": [1, "x"]}
    left, right = socket.socketpair()
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    with left, right:
        out_file = left.makefile("wb", buffering=0)
        in_file = right.makefile("rb")

        def produce():
            with out_file:
                assert cpersist.dump(obj, out_file, compress=compress) == []
            left.shutdown(socket.SHUT_WR)

        thread = _Thread(produce)
        thread.start()
        with in_file:
            try:
                out = cpersist.load(in_file)
            finally:
                thread.join_checked()
    assert_same(obj, out)


class TrickleWriter(io.RawIOBase):
    """A non-seekable raw stream that accepts at most ``most`` bytes per write."""

    def __init__(self, most=1000):
        self.data = bytearray()
        self.calls = 0
        self.most = most

    def writable(self):
        return True

    def write(self, b):
        self.calls += 1
        n = min(len(b), self.most - self.calls % 7)
        self.data += bytes(memoryview(b)[:n])
        return n


@pytest.mark.parametrize("compress, small", [(0, False), ("lz4", False), (0, True)])
def test_partial_writes_are_completed(compress, small):
    obj = {"people": [{"name": "Alice"}]} if small else {"a": big(shape=(100, 50)),
                                                          "b": ["x"] * 1000}
    stream = TrickleWriter(most=20 if small else 1000)
    assert not stream.seekable()
    cpersist.dump(obj, stream, compress=compress)
    expected = io.BytesIO()
    cpersist.dump(obj, expected, compress=compress)
    assert bytes(stream.data) == expected.getvalue()
    assert_same(obj, cpersist.load(io.BytesIO(stream.data)))


def test_bad_target_and_source_types():
    with pytest.raises(TypeError, match="target"):
        cpersist.dump({}, 123)
    with pytest.raises(TypeError, match="source"):
        cpersist.load(123)


# -- compress ------------------------------------------------------------------

ACCEPTED = [
    (0, None), (False, None), (True, ("zstd-auto", 3)),
    *[(level, ("zstd-auto", level)) for level in range(1, 10)],
    *[(name, (name, 9 if name == "max" else 3)) for name in cpersist.available_codecs()],
    ("blosc", ("blosc:lz4", 3)),
    (("gzip", 9), ("gzip", 9)), (("bz2", 1), ("bz2", 1)), (("lzma", 6), ("lzma", 6)),
    (("xz", 9), ("xz", 9)), (("max", 5), ("max", 5)), (("max", 0), None),
    (("zlib", 0), None), (("blosc:zstd", 0), None),
    (("zlib", 1), ("zlib", 1)), (("lz4", 9), ("lz4", 9)), (("blosc", 7), ("blosc:lz4", 7)),
    (("blosc:blosclz", 5), ("blosc:blosclz", 5)), (("blosc:zlib", 2), ("blosc:zlib", 2)),
]


@pytest.mark.parametrize("compress, expected", ACCEPTED, ids=[repr(c) for c, _ in ACCEPTED])
def test_compress_accepted(compress, expected, tmp_path):
    obj = {"a": np.tile(np.arange(1000.0), 20), "text": "abc" * 5000}
    path = tmp_path / "c.cp"
    cpersist.dump(obj, path, compress=compress)
    sections, root = sections_of(path)
    configs = {None if s.codec is None else (s.codec.get_config()["id"],
                                             s.codec.get_config()["level"])
               for s in sections}
    assert configs == {expected}
    assert any(s.meta.get("kind") == "array" for s in sections)
    assert_same(obj, cpersist.load(path))


REJECTED = [10, -1, 100, "nope", "blosc:nope", "zlib:10", "", {}, {"zlib": 3}, ("zlib", 10),
            ("zlib", -1), (1, "zlib"), ("zlib",), ("zlib", 3, 1), ["zlib", 3], 1.5,
            ("zlib", 1.5), ("zlib", True), ("nope", 3), b"zlib"]


@pytest.mark.parametrize("compress", REJECTED, ids=repr)
def test_compress_rejected(compress, tmp_path):
    with pytest.raises(ValueError) as info:
        cpersist.dump({"a": big()}, tmp_path / "x.cp", compress=compress)
    message = str(info.value)
    for accepted in ["zlib", "lz4", "zstd", "blosc", "blosc:lz4", "blosc:zstd", "blosc:zlib",
                     "blosc:blosclz", "True", "0-9"]:
        assert accepted in message, (accepted, message)
    no_stray_files(tmp_path, [])


@pytest.mark.parametrize("kwargs", [
    {"protocol": 1}, {"protocol": 0}, {"protocol": pickle.HIGHEST_PROTOCOL + 1},
    {"protocol": "5"}, {"protocol": True}, {"protocol": 5.0},
    {"chunk_size": 0}, {"chunk_size": -1}, {"chunk_size": 1.5}, {"chunk_size": True},
    {"chunk_size": "1000"}, {"chunk_size": (1 << 31) + 1},
    {"n_threads": 0}, {"n_threads": -2}, {"n_threads": 1.0}, {"n_threads": True},
    {"n_threads": "2"},
], ids=repr)
def test_bad_dump_arguments(kwargs, tmp_path):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        cpersist.dump({"a": big()}, tmp_path / "x.cp", **kwargs)
    no_stray_files(tmp_path, [])


@pytest.mark.parametrize("n_threads", [0, -1, 1.5, True, "1"])
def test_bad_load_n_threads(n_threads, tmp_path):
    cpersist.dump([1], tmp_path / "x.cp")
    with pytest.raises(ValueError, match="n_threads"):
        cpersist.load(tmp_path / "x.cp", n_threads=n_threads)


@pytest.mark.parametrize("trusted", [None, 3, [3], [("a",)], [("a", "b", "c")], [""]], ids=repr)
def test_bad_trusted(trusted, tmp_path):
    cpersist.dump([1], tmp_path / "x.cp")
    with pytest.raises(ValueError, match="trusted"):
        cpersist.load(tmp_path / "x.cp", trusted=trusted)


def test_good_extremes_of_arguments(tmp_path):
    obj = {"a": big(shape=(30, 7))}
    for kwargs in [{"protocol": 2}, {"protocol": pickle.HIGHEST_PROTOCOL}, {"chunk_size": 1},
                   {"n_threads": 1}, {"n_threads": 8}, {"fsync": True}]:
        cpersist.dump(obj, tmp_path / "x.cp", compress="lz4", **kwargs)
        assert_same(obj, cpersist.load(tmp_path / "x.cp", n_threads=kwargs.get("n_threads")))


# -- mmap_mode -------------------------------------------------------------------

def mmap_object():
    return {
        "c": big(1, dtype="<f8"),
        "f": big(2, dtype=">i4", order="F"),
        "view": big(3)[::2, ::-3],
        "struct": random_array([("a", "<i2"), ("b", ">f8", (2,))], (500,), seed=4),
        "zero_d": np.array(7, dtype="u2"),
        "empty": np.zeros((0, 5)),
        "masked": np.ma.MaskedArray(big(5), mask=big(5) > 0.5),
        "py": ["x", 1],
    }


@pytest.mark.parametrize("mmap_mode", [None, "r", "r+", "c"])
@pytest.mark.usefixtures("sections")
def test_mmap_modes_load(mmap_mode, tmp_path):
    obj = mmap_object()
    path = tmp_path / "m.cp"
    cpersist.dump(obj, path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = cpersist.load(path, mmap_mode=mmap_mode)
    assert_same(obj, out, mmap=True)
    for key in ["c", "f", "view", "struct", "zero_d"]:
        assert (type(out[key]) is np.memmap) == (mmap_mode is not None), key
    # numpy gives a zero-size slice of a memmap no mapping: a plain ndarray
    assert type(out["empty"]) is np.ndarray
    if mmap_mode:
        assert type(out["masked"].data) is np.memmap
        assert out["c"].flags.writeable == (mmap_mode != "r")
        # each as numpy gives a slice of a memmap of the file: one map
        mapped = [out[key] for key in ["c", "f", "view", "struct", "zero_d"]]
        assert len({id(arr._mmap) for arr in mapped}) == 1
        assert all((arr.filename, arr.offset, arr.mode) == (os.path.abspath(path), 0, mmap_mode)
                   for arr in mapped)


@pytest.mark.parametrize("compress", [0, "zstd"])
@pytest.mark.parametrize("mmap_mode", [None, "r", "r+", "c"])
def test_zero_size_and_zero_itemsize_arrays(mmap_mode, compress, tmp_path):
    obj = {"v0": np.zeros(3, "V0"), "no_fields": np.zeros((2, 3), np.dtype([])),
           "empty": np.zeros((0, 4), ">i4"), "empty_f": np.zeros((3, 0), order="F"),
           "sized": big()}
    path = tmp_path / "z.cp"
    cpersist.dump(obj, path, compress=compress)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # compressed: not mapped
        out = cpersist.load(path, mmap_mode=mmap_mode)
    assert_same(obj, out, mmap=True)
    for key in ["v0", "no_fields", "empty", "empty_f"]:
        assert type(out[key]) is np.ndarray, key  # nothing to map


@pytest.mark.parametrize("mmap_mode", ["w+", "w", "x", "readonly", "R", 1, True])
def test_bad_mmap_modes(mmap_mode, tmp_path):
    path = tmp_path / "m.cp"
    cpersist.dump({"a": big()}, path)
    before = path.read_bytes()
    with pytest.raises(ValueError, match="mmap_mode"):
        cpersist.load(path, mmap_mode=mmap_mode)
    assert path.read_bytes() == before


@pytest.mark.usefixtures("sections")
def test_memmaps_are_aligned_in_the_file(tmp_path):
    obj = mmap_object()
    path = tmp_path / "m.cp"
    cpersist.dump(obj, path)
    sections, root = sections_of(path)
    arrays = [s for s in sections if s.meta.get("kind") == "array"]
    assert len(arrays) >= 6
    assert all(s.is_raw and s.offset % ALIGN == 0 for s in arrays)
    out = cpersist.load(path, mmap_mode="r")
    offsets = {s.offset for s in arrays}
    for key in ["c", "f", "view", "struct", "zero_d"]:
        arr = out[key]
        # the file is mapped from its start, whose address is page-aligned
        assert arr.ctypes.data % ALIGN == 0, key
        base = np.frombuffer(arr._mmap, dtype=np.uint8).ctypes.data
        assert arr.ctypes.data - base in offsets, key
    del out, arr
    gc.collect()


def test_mmap_r_is_read_only(tmp_path):
    path = tmp_path / "m.cp"
    cpersist.dump({"a": big()}, path)
    out = cpersist.load(path, mmap_mode="r")
    with pytest.raises(ValueError, match="read-only"):
        out["a"][0, 0] = 1.0


def test_mmap_r_plus_writes_reach_the_file(tmp_path):
    path = tmp_path / "m.cp"
    obj = mmap_object()
    cpersist.dump(obj, path)
    out = cpersist.load(path, mmap_mode="r+")
    out["c"][0, :3] = [-1.0, -2.0, -3.0]
    out["f"][-1, -1] = 12345
    out["c"].flush()
    del out
    gc.collect()
    # The chunk checksums describe the old bytes, but the map marked the
    # file as edited: every way of loading it gives the new values.
    again = cpersist.load(path, mmap_mode="r")
    assert again["c"][0, :3].tolist() == [-1.0, -2.0, -3.0]
    assert again["f"][-1, -1] == 12345
    unverified = cpersist.load(path, verify=False)
    assert unverified["c"][0, :3].tolist() == [-1.0, -2.0, -3.0]
    assert_same(obj["struct"], unverified["struct"])
    plain = cpersist.load(path)
    assert plain["c"][0, :3].tolist() == [-1.0, -2.0, -3.0]
    assert plain["f"][-1, -1] == 12345


def test_a_path_is_read_through_its_descriptor_alone(tmp_path, monkeypatch):
    """A local regular file is opened with ``os.open`` and read, mapped and
    closed through that descriptor, no file object made (its making, its
    status and its position cost a small load more than its reads); the
    load leaves no descriptor open, and a directory or a missing path is
    refused as ``open`` refuses it."""
    from cpersist.storage import small_files

    made = []
    monkeypatch.setattr(small_files, "open",
                        lambda *args, **kw: made.append(args) or open(*args, **kw), raising=False)
    arr = np.arange(200_000.0)
    path = tmp_path / "a.cp"
    cpersist.dump({"a": arr, "n": 3}, path)
    fds = sorted(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    assert_same({"a": arr, "n": 3}, cpersist.load(path))
    mapped = cpersist.load(str(path), mmap_mode="r+")
    mapped["a"][0] = -1.0
    mapped["a"].flush()
    del mapped
    gc.collect()
    assert cpersist.load(path)["a"][0] == -1.0
    if fds is not None:
        assert sorted(os.listdir("/proc/self/fd")) == fds
    with pytest.raises(IsADirectoryError):
        cpersist.load(tmp_path)
    with pytest.raises(FileNotFoundError):
        cpersist.load(tmp_path / "missing.cp")
    assert made == []


def test_mmap_c_writes_stay_private(tmp_path):
    path = tmp_path / "m.cp"
    obj = mmap_object()
    cpersist.dump(obj, path)
    before = path.read_bytes()
    out = cpersist.load(path, mmap_mode="c")
    out["c"][...] = 0.0
    out["f"][0, 0] = 1
    assert out["c"].sum() == 0.0 and out["f"][0, 0] == 1
    del out
    gc.collect()
    assert path.read_bytes() == before
    assert_same(obj, cpersist.load(path))


def test_memmaps_outlive_load_and_the_file_object(tmp_path):
    obj = mmap_object()
    path = tmp_path / "m.cp"
    cpersist.dump(obj, path)
    from_path = cpersist.load(path, mmap_mode="r")
    with open(path, "rb") as file:
        from_file = cpersist.load(file, mmap_mode="r")
    assert file.closed
    gc.collect()
    assert type(from_file["c"]) is np.memmap
    assert_same(obj, from_file, mmap=True)
    assert_same(obj, from_path, mmap=True)


def test_mmap_r_plus_through_an_open_file(tmp_path):
    path = tmp_path / "m.cp"
    cpersist.dump({"a": big()}, path)
    with open(path, "r+b") as file:
        out = cpersist.load(file, mmap_mode="r+")
    out["a"][1, 1] = -5.0
    out["a"].flush()
    del out
    assert cpersist.load(path, mmap_mode="c")["a"][1, 1] == -5.0


def test_mmap_r_plus_through_a_read_only_file_says_so(tmp_path):
    path = tmp_path / "m.cp"
    cpersist.dump({"a": big()}, path)
    with open(path, "rb") as file:
        with pytest.raises(ValueError, match=r"mmap_mode='r\+'.*read-only.*'r\+b'") as info:
            cpersist.load(file, mmap_mode="r+")
        assert str(path) in str(info.value)
        assert_same({"a": big()}, cpersist.load(file, mmap_mode="c"), mmap=True)


def test_memmap_from_an_open_file_with_a_prefix(tmp_path):
    obj = mmap_object()
    path = tmp_path / "m.cp"
    with open(path, "wb") as file:
        file.write(b"some header of another format" * 3)
        start = file.tell()
        cpersist.dump(obj, file)
        file.write(b"")
    with open(path, "rb") as file:
        file.seek(start)
        out = cpersist.load(file, mmap_mode="r")
    assert type(out["c"]) is np.memmap
    assert_same(obj, out, mmap=True)


def test_memmap_through_a_named_temporary_file(tmp_path):
    """NamedTemporaryFile returns a wrapper around a plain file object: it
    is mapped (in every mode) and pread like the file it wraps, at its
    offset, with no warning."""
    obj = mmap_object()
    prefix = b"another format's header" * 5
    with tempfile.NamedTemporaryFile(dir=tmp_path) as tmp:
        assert type(tmp) is not io.BufferedRandom
        tmp.write(prefix)
        cpersist.dump(obj, tmp)
        for mode in ("r", "c", "r+"):
            tmp.seek(len(prefix))
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                out = cpersist.load(tmp, mmap_mode=mode)
            assert type(out["c"]) is np.memmap and out["c"].mode == mode
            assert_same(obj, out, mmap=True)
        out["c"][0] = -1  # 'r+': the write reaches the file
        out["c"].flush()
        tmp.seek(len(prefix))
        assert cpersist.load(tmp, verify=False)["c"].flat[0] == -1
    with tempfile.NamedTemporaryFile(dir=tmp_path) as tmp:
        compressible = {"a": np.arange(3_000_000, dtype=np.int64) // 7}
        cpersist.dump(compressible, tmp, compress="zstd", chunk_size=1 << 20)
        tmp.seek(0)
        reader = ContainerReader(tmp, "tmp")
        assert reader.source.fd == tmp.file.fileno()  # each thread preads its chunks
        tmp.seek(0)
        assert_same(compressible, cpersist.load(tmp, n_threads=2))


def test_compressed_arrays_with_mmap_warn_once(tmp_path):
    obj = {"a": big(1), "b": big(2), "c": [big(3), big(4)], "d": big(5).T}
    path = tmp_path / "z.cp"
    cpersist.dump(obj, path, compress="zlib")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = cpersist.load(path, mmap_mode="r")
    assert len(caught) == 1, [str(w.message) for w in caught]
    warning = caught[0]
    assert warning.category is UserWarning
    assert str(path) in str(warning.message) and "compressed" in str(warning.message)
    assert warning.filename == __file__  # points at the caller of load
    assert_same(obj, out)
    assert type(out["a"]) is np.ndarray


@pytest.mark.parametrize("compress", [0, "lz4"])
def test_bytesio_source_with_mmap_warns_and_loads(compress):
    obj = mmap_object()
    buf = io.BytesIO()
    cpersist.dump(obj, buf, compress=compress)
    buf.seek(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = cpersist.load(buf, mmap_mode="r")
    assert len(caught) == 1 and caught[0].category is UserWarning
    assert "memory-map" in str(caught[0].message)
    assert caught[0].filename == __file__
    assert_same(obj, out)
    assert type(out["c"]) is np.ndarray


def test_wrapping_file_object_with_mmap_warns_and_loads(tmp_path):
    """A GzipFile is seekable and has a fileno(), of the compressed file:
    mapping that descriptor would give back the gzip stream's bytes."""
    obj = mmap_object()
    path = tmp_path / "a.cp.gz"
    with gzip.open(path, "wb") as gz:
        cpersist.dump(obj, gz)
    with gzip.open(path, "rb") as gz, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert gz.seekable() and gz.fileno() >= 0
        out = cpersist.load(gz, mmap_mode="r")
    assert len(caught) == 1 and "GzipFile is not a plain file object" in str(caught[0].message)
    assert_same(obj, out)
    assert type(out["c"]) is np.ndarray


def test_pipe_source_with_mmap_warns_and_loads(tmp_path):
    obj = mmap_object()
    buf = io.BytesIO()
    cpersist.dump(obj, buf)
    reader, thread = pipe_bytes(buf.getvalue())
    with reader, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = cpersist.load(reader, mmap_mode="r")
    thread.join_checked()
    assert len(caught) == 1 and "not seekable" in str(caught[0].message)
    assert caught[0].filename == __file__
    assert_same(obj, out)


def test_raw_file_without_mmap_does_not_warn(tmp_path):
    path = tmp_path / "r.cp"
    cpersist.dump(mmap_object(), path, compress=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cpersist.load(path)
        with open(path, "rb") as file:
            cpersist.load(file)


# -- failed dumps leave nothing behind ---------------------------------------

module_lambda = lambda x: x  # noqa: E731  (a module-level lambda: PicklingError)


def unpicklable_objects():
    return [
        {"f": module_lambda},
        {"arr": big(), "then": [1, lambda: 2]},  # fails after an array was written
        [big(), big(2), (x for x in [])],
        {"local": [lambda: 1]},  # a local lambda: AttributeError before Python 3.14
    ]


@pytest.mark.parametrize("case", range(4))
@pytest.mark.parametrize("compress", [0, "zstd"])
def test_failed_dump_leaves_no_file(case, compress, tmp_path):
    obj = unpicklable_objects()[case]
    with pytest.raises((pickle.PicklingError, TypeError, AttributeError)):
        cpersist.dump(obj, tmp_path / "x.cp", compress=compress)
    no_stray_files(tmp_path, [])


@pytest.mark.parametrize("case", range(4))
def test_failed_dump_keeps_the_old_file(case, tmp_path):
    path = tmp_path / "x.cp"
    cpersist.dump({"old": big()}, path)
    before = path.read_bytes()
    with pytest.raises((pickle.PicklingError, TypeError, AttributeError)):
        cpersist.dump(unpicklable_objects()[case], path, compress=1)
    assert path.read_bytes() == before
    no_stray_files(tmp_path, ["x.cp"])
    assert_same({"old": big()}, cpersist.load(path))


def test_dump_into_a_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError):
        cpersist.dump([1], tmp_path / "missing" / "x.cp")
    no_stray_files(tmp_path, [])


# -- bad files -----------------------------------------------------------------

@pytest.fixture
def good_file(tmp_path):
    path = tmp_path / "good.cp"
    cpersist.dump({"a": big(), "b": [1, 2, "x"], "c": big(2)[::2]}, path, compress="zstd",
                  chunk_size=50000)
    return path


def _load_each_way(path):
    """Load ``path`` as a path, from an open file, a BytesIO and a pipe."""
    data = path.read_bytes()
    errors = []
    sources = ["path", "file", "bytesio", "pipe"]
    for how in sources:
        with pytest.raises(cpersist.CorruptFileError) as info:
            if how == "path":
                cpersist.load(path)
            elif how == "file":
                with open(path, "rb") as file:
                    cpersist.load(file)
            elif how == "bytesio":
                cpersist.load(io.BytesIO(data))
            else:
                reader, thread = pipe_bytes(data)
                with reader:
                    try:
                        cpersist.load(reader)
                    finally:
                        thread.join_checked()
        errors.append(info.value)
    assert str(path) in str(errors[0])
    return errors


def test_empty_file(tmp_path):
    path = tmp_path / "empty.cp"
    path.write_bytes(b"")
    errors = _load_each_way(path)
    assert "empty" in str(errors[0])


@pytest.mark.parametrize("size", [1, 7, 8, 100, 5000])
def test_random_bytes(size, tmp_path):
    path = tmp_path / "random.cp"
    path.write_bytes(np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
                     .tobytes())
    errors = _load_each_way(path)
    assert "not a cpersist file" in str(errors[0]) or "truncated" in str(errors[0])


def test_npy_file(tmp_path):
    path = tmp_path / "array.npy"
    np.save(path, big())
    errors = _load_each_way(path)
    assert "not a cpersist file" in str(errors[0])


@pytest.mark.parametrize("compress", [0, 3])
def test_joblib_file(compress, tmp_path):
    path = tmp_path / "model.joblib"
    joblib.dump({"a": big(), "b": [1, 2]}, path, compress=compress)
    errors = _load_each_way(path)
    assert "not a cpersist file" in str(errors[0])


def test_pickle_file(tmp_path):
    path = tmp_path / "obj.pkl"
    path.write_bytes(pickle.dumps({"a": big()}))
    _load_each_way(path)


@pytest.mark.parametrize("cut", [1, 8, 9, 63, 64, 65, 1000, "half", -1, -8, -31, -32, -33,
                                 -200])
def test_truncated_file(cut, good_file):
    data = good_file.read_bytes()
    keep = len(data) // 2 if cut == "half" else cut if cut > 0 else len(data) + cut
    good_file.write_bytes(data[:keep])
    _load_each_way(good_file)


def test_truncated_raw_file_with_mmap(tmp_path):
    path = tmp_path / "raw.cp"
    cpersist.dump({"a": big()}, path)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(cpersist.CorruptFileError):
        cpersist.load(path, mmap_mode="r")


def test_newer_major_version(good_file):
    data = bytearray(good_file.read_bytes())
    major, minor = struct.unpack_from("<HH", data, len(MAGIC))
    assert (major, minor) == (FORMAT_MAJOR, FORMAT_MINOR)
    struct.pack_into("<H", data, len(MAGIC), major + 1)
    good_file.write_bytes(bytes(data))
    for error in _load_each_way(good_file):
        assert type(error) is cpersist.UnsupportedVersionError
        assert "newer" in str(error) and f"{major + 1}.{minor}" in str(error)


def test_error_classes():
    assert issubclass(cpersist.CorruptFileError, cpersist.CpersistError)
    assert issubclass(cpersist.CorruptFileError, ValueError)
    assert issubclass(cpersist.UnsupportedVersionError, cpersist.CorruptFileError)
    assert issubclass(cpersist.UntrustedObjectError, cpersist.CpersistError)


# -- determinism and threads ------------------------------------------------------

def threads_object(scale=1):
    """Arrays of several 20000-byte chunks each; ``scale`` shrinks them (still
    several chunks) for codecs too slow to encode the full size many times."""
    return {"a": big(1, shape=(300 // scale, 200)),
            "b": np.arange(200000 // scale, dtype=">i8") % 1000,
            "view": big(2, shape=(300 // scale, 200))[::2, ::-1], "py": list(range(5000)),
            "small": np.arange(10)}


@pytest.mark.parametrize("compress", COMPRESSIONS)
def test_threads_give_identical_files(compress, tmp_path, monkeypatch):
    obj = threads_object(scale={"max": 20, "lzma": 10, "xz": 10, "bz2": 10}.get(compress, 1))
    if compress == "max":
        # Threads encode sections; "max" would also try the small object
        # as one chunk (no threads) and might keep that: sections only.
        monkeypatch.setattr("cpersist.pickling.write_max.WHOLE_STREAM_UP_TO", -1)
    files = []
    for n_threads in (1, 2, 1, 4):
        buf = io.BytesIO()
        cpersist.dump(obj, buf, compress=compress, chunk_size=20000, n_threads=n_threads)
        files.append(buf.getvalue())
    assert files[0] == files[1] == files[2] == files[3]
    for n_threads in (1, 2):
        assert_same(obj, cpersist.load(io.BytesIO(files[0]), n_threads=n_threads))


def test_raw_sections_load_the_same_through_every_read_path(tmp_path):
    """Multi-chunk raw sections from a file at an offset, a BytesIO and a
    GzipFile, on 1 to 3 threads, checked and not."""
    obj = threads_object()
    buf = io.BytesIO()
    cpersist.dump(obj, buf, chunk_size=20000)
    data = buf.getvalue()
    path = tmp_path / "plain.cp"
    path.write_bytes(data)
    prefixed = tmp_path / "prefixed.cp"
    prefix = b"another format's header" * 7
    prefixed.write_bytes(prefix + data)
    gz_path = tmp_path / "plain.cp.gz"
    with gzip.open(gz_path, "wb") as gz:
        gz.write(data)
    for n_threads in (1, 2, 3):
        for verify in (True, False):
            assert_same(obj, cpersist.load(path, n_threads=n_threads, verify=verify))
        with open(prefixed, "rb") as file:
            file.seek(len(prefix))
            assert_same(obj, cpersist.load(file, n_threads=n_threads))
        assert_same(obj, cpersist.load(io.BytesIO(data), n_threads=n_threads))
        # GzipFile.fileno() is the compressed file's: its bytes are not these.
        with gzip.open(gz_path, "rb") as gz:
            assert_same(obj, cpersist.load(gz, n_threads=n_threads))


def test_read_buffer_pool_reuses_and_caps():
    pool = BufferPool(keep_bytes=250)
    a = pool.take(100)
    assert isinstance(a, bytearray) and len(a) == 100
    pool.give(a)
    assert pool.take(80) is a  # reused, big enough
    b, c = pool.take(100), pool.take(100)
    for buf in (a, b, c):
        pool.give(buf)  # the third does not fit in 250 bytes: dropped
    assert {id(pool.take(100)), id(pool.take(100))} == {id(a), id(b)}
    assert pool.take(100) is not c
    pool.give(a)
    bigger = pool.take(101)  # a is too small: dropped, a new one made
    assert len(bigger) == 101 and bigger is not a
    assert pool.take(1) is not a


def test_read_buffer_pool_hands_out_the_smallest_that_fits():
    pool = BufferPool(keep_bytes=1000)
    small, large = pool.take(100), pool.take(300)
    pool.give(small)
    pool.give(large)
    assert pool.take(90) is small  # not the one given back last
    assert pool.take(250) is large


def test_read_buffer_pool_says_which_buffers_are_backed_already():
    """A section read into memory already backed is copied by one thread:
    a bytearray (zero-filled when made) and a buffer kept are, a new map
    is not."""
    from cpersist.container.buffers import MAP_FROM

    pool = BufferPool(keep_bytes=1 << 30)
    small, backed = pool.take_backed(100)
    assert type(small) is bytearray and backed
    large, backed = pool.take_backed(4 * MAP_FROM)
    assert type(large) is not bytearray and not backed
    pool.give(large)
    assert pool.take_backed(4 * MAP_FROM) == (large, True)
    assert pool.take_backed(4 * MAP_FROM, exact=True)[1]


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_large_read_buffers_cost_no_memory_until_used():
    """A large buffer is an anonymous map, rounded up so that a slightly
    longer chunk fits it next time: the pages a reader never touches (the
    scratch space a Blosc part does not need) are never backed."""
    from cpersist.benchmarks.measure import rss_bytes
    from cpersist.container.buffers import MAP_FROM

    pool = BufferPool(keep_bytes=1 << 30)
    before = rss_bytes()[0]
    buffer = pool.take(256 * MAP_FROM + 1)
    assert len(buffer) == 257 * MAP_FROM
    assert rss_bytes()[0] - before < 16 * MAP_FROM  # a bytearray: all 64 MiB
    memoryview(buffer)[:MAP_FROM] = b"x" * MAP_FROM
    pool.give(buffer)
    assert pool.take(256 * MAP_FROM + 2) is buffer


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_forked_child_writes_its_own_read_buffers():
    from cpersist.container.buffers import MAP_FROM

    pool = BufferPool(keep_bytes=1 << 30)
    buffer = pool.take(4 * MAP_FROM)
    view = memoryview(buffer)
    view[:4] = b"mine"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        view[:4] = b"kids"
        os._exit(0 if bytes(view[:4]) == b"kids" else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert bytes(view[:4]) == b"mine"


def test_concurrent_loads_share_read_buffers_safely(tmp_path):
    """Loads on several user threads at once, each on a pool of 2, take and
    give back the shared read buffers; each must get exactly its own data."""
    rng = np.random.default_rng(11)
    paths, objs = [], []
    for i in range(4):
        # Compressible, several chunks of different stored sizes per file.
        obj = {"x": np.cumsum(rng.integers(-3, 4, size=60000 + 7000 * i)).astype("<i8"),
               "y": np.repeat(rng.random(900 + i), 40 + i)}
        path = tmp_path / f"f{i}.cp"
        cpersist.dump(obj, path, compress=("zstd", 1 + i), chunk_size=30000)
        paths.append(path)
        objs.append(obj)

    def loads(k):
        for _ in range(15):
            for i in (k, (k + 1) % 4, (k + 2) % 4):
                assert_same(objs[i], cpersist.load(paths[i], n_threads=2))

    threads = [_Thread(lambda k=k: loads(k)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join_checked()


# -- file layout ---------------------------------------------------------------

@pytest.mark.usefixtures("sections")
def test_file_layout(tmp_path):
    a = np.arange(1000, dtype=">i4")
    b = np.asfortranarray(np.arange(1200, dtype="<f8").reshape(30, 40))
    c = np.arange(999, dtype="u1")  # an odd size: the next section must be re-aligned
    path = tmp_path / "layout.cp"
    cpersist.dump({"a": a, "c": c, "b": b}, path)
    data = path.read_bytes()
    assert data.startswith(MAGIC) and MAGIC == b"\x89CPS\r\n\x1a\n"
    assert data[8:12] == b"\x02\x00\x02\x00"  # major 2, minor 2, little-endian
    assert data[12:64] == bytes(52)  # no flags, reserved
    assert data.endswith(END_MAGIC)
    offset, length, checksum, _ = TRAILER.unpack(data[-TRAILER.size:])
    assert offset + length == len(data) - TRAILER.size
    # the end record: kind 3, its payload the index and the trailer
    assert struct.unpack("<Q", data[offset - 8:offset])[0] == 3 << 56 | length + TRAILER.size
    index = json.loads(data[offset:offset + length])
    assert checksum == __import__("xxhash").xxh3_64_intdigest(data[offset:offset + length])
    assert index["format"] == [2, 2] and index["edited"] is False
    sections = index["sections"]
    for section in sections:  # the chunk table is JSON text, with its totals
        table = json.loads(section["chunks"])
        assert section["stored_size"] == sum(entry[0] for entry in table)
        assert section["raw_size"] == sum(entry[1] for entry in table)
    by_shape = {tuple(s["meta"]["shape"]): s for s in sections
                if s["meta"].get("kind") == "array"}
    for arr in (a, b, c):
        section = by_shape[arr.shape]
        start = section["offset"]
        assert start % ALIGN == 0 and section["codec"] is None
        # the array's bytes, in its own memory order, lie there as they are
        assert data[start:start + arr.nbytes] == arr.tobytes(order="A")
        view = np.frombuffer(data, dtype=arr.dtype, count=arr.size, offset=start)
        order = "F" if section["meta"]["order"] == "F" else "C"
        assert (view.reshape(arr.shape, order=order) == arr).all()
    assert by_shape[(30, 40)]["meta"]["order"] == "F"
    assert data[by_shape[(1000,)]["offset"]:][:4] == b"\x00\x00\x00\x00"
    assert data[by_shape[(1000,)]["offset"]:][4:8] == b"\x00\x00\x00\x01"  # big-endian 1
    for arr in (a, b, c):  # each raw array is one aligned record (kind 2)
        start = by_shape[arr.shape]["offset"]
        header_end = len(data[:start].rstrip(b"\0"))  # its last byte is the kind
        assert struct.unpack("<Q", data[header_end - 8:header_end])[0] == (
            2 << 56 | arr.nbytes)
        assert start == header_end + -header_end % ALIGN  # zeros up to the boundary


def test_layout_with_a_prefix_is_relative(tmp_path):
    path = tmp_path / "prefixed.bin"
    buf = io.BytesIO()
    cpersist.dump({"a": big()}, buf)
    with open(path, "wb") as file:
        file.write(b"x" * 13)
        cpersist.dump({"a": big()}, file)
    assert path.read_bytes()[13:] == buf.getvalue()


# -- restricted loads -------------------------------------------------------------

class Point:
    def __init__(self, x):
        self.x = x


def safe_object():
    return {
        "arrays": [big(1), big(2, dtype=">i2", order="F"), big(3)[::3]],
        "small": np.arange(5, dtype="u1"),
        "list": [1, 2.5, "s", None, True, (1, 2), {3}, frozenset([4]), b"b", 1 + 2j],
        "scalars": [np.float32(1.5), np.int64(-3), np.bool_(False), np.datetime64("2020-01"),
                    np.timedelta64(5, "s"), np.str_("u"), np.complex64(1j)],
        "dtypes": [np.dtype("f4"), np.dtype([("a", ">i4"), ("b", "U3", (2,))])],
        "matrix": make_matrix(np.eye(3)),
        "masked": np.ma.MaskedArray(big(4), mask=big(4) > 0.5, fill_value=1.5),
        "masked_nomask": np.ma.MaskedArray(np.arange(3.0)),
        "masked_constant": np.ma.masked,
        "recarray": np.rec.array([(1, 2.0)], dtype=[("x", "i4"), ("y", "f8")]),
        "objects": np.array(["a", None, 3], dtype=object),
        "structured": random_array([("a", "<i4"), ("b", ">f8")], (100,), seed=5),
    }


@pytest.mark.parametrize("compress", [0, "zstd", "blosc:lz4"])
def test_restricted_load_of_safe_data(compress, tmp_path):
    obj = safe_object()
    out = roundtrip(obj, "path", tmp_path, compress=compress, load_kwargs={"trusted": False})
    assert_same(obj, out)


def test_restricted_load_with_mmap(tmp_path):
    obj = safe_object()
    out = roundtrip(obj, "path", tmp_path, load_kwargs={"trusted": False, "mmap_mode": "r"})
    assert_same(obj, out, mmap=True)


@pytest.mark.parametrize("obj", [Point(1), [1, {"p": Point(big())}], {"f": os.system},
                                 {"t": Point}], ids=["instance", "nested", "function", "class"])
def test_restricted_load_refuses_other_globals(obj, tmp_path):
    path = tmp_path / "u.cp"
    cpersist.dump(obj, path)
    with pytest.raises(cpersist.UntrustedObjectError) as info:
        cpersist.load(path, trusted=False)
    error = info.value
    module, name = ((os.system.__module__, "system") if obj == {"f": os.system}
                    else (__name__, "Point"))
    assert (error.module, error.name) == (module, name)
    assert f"{module}.{name}" in str(error) and str(path) in str(error)


def test_restricted_load_refuses_before_calling(tmp_path):
    path = tmp_path / "u.cp"
    cpersist.dump(Recorder(), path)
    Recorder.calls.clear()
    with pytest.raises(cpersist.UntrustedObjectError):
        cpersist.load(path, trusted=False)
    assert Recorder.calls == []
    cpersist.load(path)
    assert Recorder.calls == ["called"]


def record(tag):
    Recorder.calls.append(tag)
    return tag


class Recorder:
    calls = []

    def __reduce__(self):
        return record, ("called",)


@pytest.mark.parametrize("trusted", [
    [(__name__, "Point")], (__name__, "Point"), ["tests"], "tests", [__name__],
    ["tests.test_api", ("x", "y")], True,
], ids=repr)
def test_trusted_admits(trusted, tmp_path):
    obj = {"p": Point(big()), "safe": safe_object()}
    out = roundtrip(obj, "path", tmp_path, compress="lz4", load_kwargs={"trusted": trusted})
    assert_same(obj, out)
    assert type(out["p"]) is Point


@pytest.mark.parametrize("trusted", [["test"], ["tests.test_ap"], [(__name__, "Poin")],
                                     [("tests", "Point")], False, []], ids=repr)
def test_trusted_is_exact(trusted, tmp_path):
    path = tmp_path / "u.cp"
    cpersist.dump({"p": Point(1)}, path)
    with pytest.raises(cpersist.UntrustedObjectError):
        cpersist.load(path, trusted=trusted)


def test_stored_array_outside_cpersist(tmp_path):
    """A cpersist pickle stream unpickled by plain pickle fails with a clear message."""
    from cpersist.pickler import stored_array
    with pytest.raises(pickle.UnpicklingError, match="cpersist.load"):
        stored_array(0)
