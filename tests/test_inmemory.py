"""``dumps``/``loads``: the bytes-like objects accepted, views of the buffer
against copies, read-only buffers, damaged or extended bytes, restricted
loads. (Every round trip of test_roundtrip also runs through them.)"""

import collections
import gc
import inspect
import io
import mmap
import pickle

import numpy as np
import pytest

import cpersist
from cpersist import CorruptFileError, UntrustedObjectError

from .conftest import assert_same

SMALL = [{"people": [{"name": "Alice"}]}, dict((str(n), n) for n in range(100)), None, 0,
         "", [], (1.5, b"x" * 200, {3, 4})]


def _model():
    return {"w": np.arange(12.0).reshape(3, 4), "f": np.asfortranarray(np.ones((3, 2), "<i2")),
            "name": "m"}


def _is_view_of(arr, data):
    return np.shares_memory(arr, np.frombuffer(data, dtype=np.uint8))


@pytest.mark.parametrize("obj", SMALL, ids=range(len(SMALL)))
@pytest.mark.parametrize("compress", [0, 3])
def test_small_objects(obj, compress):
    data = cpersist.dumps(obj, compress)
    assert type(data) is bytes
    assert_same(obj, cpersist.loads(data))
    assert_same(obj, cpersist.loads(data, trusted=False, copy=True))


@pytest.mark.parametrize("obj", SMALL, ids=range(len(SMALL)))
def test_an_object_without_arrays_costs_little_space(obj):
    # The pickle stream, in a dump without a JSON index.
    assert len(cpersist.dumps(obj)) <= len(pickle.dumps(obj, protocol=5)) + 128


def test_the_dump_is_a_cpersist_file(tmp_path):
    for obj in SMALL + [_model()]:
        data = cpersist.dumps(obj)
        path = tmp_path / "obj.cp"
        path.write_bytes(data)
        assert_same(obj, cpersist.load(path))
        assert_same(obj, cpersist.load(io.BytesIO(data)))
        assert cpersist.verify(path)["sections"] >= 1
        info = cpersist.inspect(path)
        assert info["file_bytes"] == len(data)
        assert len(info["arrays"]) == (2 if isinstance(obj, dict) and "w" in obj else 0)


def test_loads_reads_what_dump_writes():
    obj = _model()
    buffer = io.BytesIO()
    cpersist.dump(obj, buffer, compress="lz4")
    assert_same(obj, cpersist.loads(buffer.getvalue()))


def _mmap_of(data, tmp_path):
    path = tmp_path / "obj.cp"
    path.write_bytes(data)
    with open(path, "rb") as file:
        return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)


BUFFERS = {
    "bytes": (bytes, False),
    "bytearray": (bytearray, True),
    "memoryview": (memoryview, False),
    "memoryview of bytearray": (lambda d: memoryview(bytearray(d)), True),
    "uint8 array": (lambda d: np.frombuffer(d, dtype=np.uint8).copy(), True),
    "read-only uint8 array": (lambda d: np.frombuffer(d, dtype=np.uint8), False),
}


@pytest.mark.parametrize("kind", sorted(BUFFERS))
def test_raw_arrays_are_views_of_the_buffer(kind):
    make, writable = BUFFERS[kind]
    obj = _model()
    data = make(cpersist.dumps(obj))
    out = cpersist.loads(data)
    assert_same(obj, out)
    for key in ("w", "f"):
        assert _is_view_of(out[key], data)
        assert not out[key].flags.owndata
        assert out[key].flags.writeable is writable
    assert out["f"].flags.f_contiguous
    if writable:
        # A view: a change made through the array reaches the buffer, and
        # one made to the buffer shows in the array.
        out["w"][0, 0] = 42.0
        assert cpersist.loads(data, verify=False)["w"][0, 0] == 42.0
    else:
        with pytest.raises(ValueError, match="read-only"):
            out["w"][0, 0] = 42.0


@pytest.mark.parametrize("kind", sorted(BUFFERS))
def test_copy_gives_arrays_owning_their_memory(kind):
    make, _ = BUFFERS[kind]
    obj = _model()
    data = make(cpersist.dumps(obj))
    out = cpersist.loads(data, copy=True)
    assert_same(obj, out)
    for key in ("w", "f"):
        assert out[key].flags.owndata and out[key].flags.writeable
        assert not _is_view_of(out[key], data)


def test_compressed_arrays_own_their_memory():
    data = cpersist.dumps({"w": np.zeros(100_000)}, compress="zstd")
    out = cpersist.loads(data)
    assert out["w"].flags.owndata and out["w"].flags.writeable


def test_views_keep_the_buffer_alive():
    data = bytearray(cpersist.dumps(_model()))
    w = cpersist.loads(data)["w"]
    del data
    gc.collect()
    assert_same(_model()["w"], w)


def test_mmap(tmp_path):
    obj = _model()
    mm = _mmap_of(cpersist.dumps(obj), tmp_path)
    out = cpersist.loads(mm)
    assert_same(obj, out)
    assert not out["w"].flags.writeable  # ACCESS_READ
    with pytest.raises(BufferError):
        mm.close()  # the arrays still view it
    del out
    gc.collect()
    mm.close()


def test_numpy_array_of_other_dtype_and_bad_types():
    data = cpersist.dumps(_model())
    padded = bytes(data) + bytes(-len(data) % 8)
    with pytest.raises(TypeError, match="bytes-like"):
        cpersist.loads("a string")
    with pytest.raises(TypeError, match="contiguous"):
        cpersist.loads(memoryview(np.frombuffer(padded, np.uint8))[::2])
    with pytest.raises(TypeError, match="bytes-like"):
        cpersist.loads(io.BytesIO(data))


def test_trailing_bytes_are_an_error():
    data = cpersist.dumps({"a": 1})
    with pytest.raises(CorruptFileError, match="trailing data"):
        cpersist.loads(data + b"junk")
    with pytest.raises(CorruptFileError, match="another dump follows"):
        cpersist.loads(data + data)
    big = cpersist.dumps(_model())
    with pytest.raises(CorruptFileError, match="trailing data"):
        cpersist.loads(big + b"\0" * 100)


def test_several_dumps_are_read_through_a_stream():
    objs = [{"a": 1}, _model(), "three"]
    stream = io.BytesIO(b"".join(cpersist.dumps(obj) for obj in objs))
    for obj in objs:
        assert_same(obj, cpersist.load(stream))
    assert stream.read() == b""


def _positions(data):
    """Offsets to damage: every byte of a small dump, a spread of a larger one."""
    step = max(1, len(data) // 400)
    return range(0, len(data), step)


@pytest.mark.parametrize("obj", [SMALL[0], "x" * 3000, _model()], ids=["people", "str", "model"])
def test_every_damaged_byte_is_detected(obj):
    data = cpersist.dumps(obj)
    for pos in _positions(data):
        damaged = bytearray(data)
        damaged[pos] ^= 0x10
        # A small object's restricted load takes a path of its own.
        for trusted in (True, False) if len(data) < 1000 else (True,):
            try:
                out = cpersist.loads(bytes(damaged), trusted=trusted)
            except (CorruptFileError, cpersist.UnsupportedVersionError):
                continue
            # Only bytes that carry no information (padding, reserved header
            # fields) may be changed without notice.
            assert_same(obj, out, f"damage at {pos}")


def test_truncated_and_empty():
    data = cpersist.dumps(_model())
    for end in (0, 1, 8, 64, len(data) // 2, len(data) - 1):
        with pytest.raises(CorruptFileError):
            cpersist.loads(data[:end])
    with pytest.raises(CorruptFileError, match="not a cpersist file"):
        cpersist.loads(pickle.dumps({"a": 1}))


class _RefusesState:
    def __init__(self):
        self.x = 1

    def __setstate__(self, state):
        raise ValueError("the object's own error")


@pytest.mark.parametrize("form", [bytes, bytearray])
def test_a_checksummed_stream_that_fails_to_unpickle(form):
    """A compact dump whose checksums hold but whose stream does not
    unpickle is damaged, read from ``bytes`` or any other buffer; an error
    of the object's own code is raised as it is."""
    from cpersist.container.compact import compact_dump

    for stream in (b"\x80\x05K\x01", b"\x80\x05\xff.", b"\x80\x05K\x01K\x02K\x03s."):
        with pytest.raises(CorruptFileError, match="damaged pickle stream"):
            cpersist.loads(form(compact_dump(stream)))
    with pytest.raises(ValueError, match="the object's own error"):
        cpersist.loads(form(compact_dump(pickle.dumps(_RefusesState(), protocol=5))))


def test_verify_false_skips_checking_the_arrays():
    obj = {"w": np.zeros(1000)}
    data = bytearray(cpersist.dumps(obj))
    out = cpersist.loads(data)
    out["w"][5] = 1.0  # through the writable view, behind the checksum's back
    with pytest.raises(CorruptFileError, match="checksum mismatch"):
        cpersist.loads(data)
    assert cpersist.loads(data, verify=False)["w"][5] == 1.0


def test_restricted_loads():
    obj = {"w": np.arange(3), "counts": collections.Counter("abca")}
    assert_same(obj, cpersist.loads(cpersist.dumps(obj), trusted=False))
    data = cpersist.dumps({"f": collections.namedtuple})
    with pytest.raises(UntrustedObjectError, match="namedtuple"):
        cpersist.loads(data, trusted=False)
    assert cpersist.loads(data, trusted=["collections"])["f"] is collections.namedtuple
    small = cpersist.dumps(pickle.loads)
    with pytest.raises(UntrustedObjectError):
        cpersist.loads(small, trusted=False)
    assert cpersist.loads(small) is pickle.loads


def test_arguments():
    with pytest.raises(ValueError, match="compress"):
        cpersist.dumps(1, compress="nope")
    with pytest.raises(ValueError, match="protocol"):
        cpersist.dumps(1, protocol=99)
    with pytest.raises(ValueError, match="n_threads"):
        cpersist.dumps(1, n_threads=0)
    with pytest.raises(ValueError, match="n_threads"):
        cpersist.loads(cpersist.dumps(1), n_threads=0)
    with pytest.raises(ValueError, match="trusted"):
        cpersist.loads(cpersist.dumps(1), trusted=[3])
    # Everything after data is keyword-only, as the signature says: a
    # positional False is not taken for a restricted load, nor ignored.
    assert str(inspect.signature(cpersist.loads)) == (
        "(data, *, trusted=True, verify=True, n_threads=None, copy=False, limits=None, "
        "jax_as_numpy=False)")
    assert str(inspect.signature(cpersist.dumps)) == (
        "(obj, compress=0, *, protocol=None, chunk_size=None, n_threads=None)")
    for data in (cpersist.dumps(pickle.loads), cpersist.dumps(_model())):
        for args in ((False,), (False, True), (None,)):
            with pytest.raises(TypeError, match="1 positional argument"):
                cpersist.loads(data, *args)
    for obj in ({"a": 1}, _model()):
        for args in ((0, 4), (3, None), (0, None, None)):
            with pytest.raises(TypeError, match="2 positional arguments"):
                cpersist.dumps(obj, *args)
    for protocol in (2, 3, 4, 5):
        assert_same(_model(), cpersist.loads(cpersist.dumps(_model(), protocol=protocol)))
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        cpersist.dumps(lambda: 1)
