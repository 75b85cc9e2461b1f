"""Objects with nothing to store as sections: compact dumps written by
``dump`` as by ``dumps``, and read by ``load`` without the container reader."""

import io
import os
import pickle

import numpy as np
import pytest

import cpersist
from cpersist.pickling import dump as _writer
from cpersist.pickling.write import RAW_INLINE_BELOW
from cpersist.container import ContainerReader
from cpersist.container.compact import OVERHEAD
from cpersist.container.sources import MemorySource

SMALL = {"people": [{"name": "Alice", "age": 31}], "ok": True, "scores": (1.5, None)}


def _reader(data):
    return ContainerReader(MemorySource(memoryview(data), "<test>"))


@pytest.mark.parametrize("compress", [0, 3, "zstd", "blosc:lz4", "lz4", "zlib"])
def test_a_small_object_is_a_compact_dump_near_pickles_size(tmp_path, compress):
    path = tmp_path / "small.cp"
    cpersist.dump(SMALL, path, compress=compress)
    data = path.read_bytes()
    stream = pickle.dumps(SMALL, protocol=pickle.HIGHEST_PROTOCOL)
    assert len(data) == len(stream) + OVERHEAD <= len(stream) + 128
    assert data == cpersist.dumps(SMALL)
    back = cpersist.load(path)
    assert back == SMALL and type(back["scores"]) is tuple
    assert _reader(data).sections[0].meta == {"kind": "pickle"}  # the general reader agrees


def test_a_compact_file_loads_without_the_container_reader(tmp_path, monkeypatch):
    path = tmp_path / "small.cp"
    cpersist.dump(SMALL, path)

    def refuse(*args, **kwargs):
        raise AssertionError("the general reader was used")

    monkeypatch.setattr("cpersist.pickling.read.ContainerReader", refuse)
    monkeypatch.setattr("cpersist.container.reader.ContainerReader", refuse)
    assert cpersist.load(path) == SMALL
    assert cpersist.load(str(path), mmap_mode="r") == SMALL
    with pytest.raises(AssertionError):  # a restricted load checks every global
        cpersist.load(path, trusted=False)


def test_small_arrays_kept_in_a_compressed_stream_pickle_once(tmp_path, monkeypatch):
    """Written the general way (the file says it is compressed), from the
    stream pickled once."""
    obj = {"coef": np.arange(12.0).reshape(3, 4, order="F"), "classes": np.array([0, 1])}
    path = tmp_path / "m.cp"
    calls = []
    monkeypatch.setattr(_writer, "SectionWriter", lambda *args, **kw: calls.append(args))
    cpersist.dump(obj, path, compress=3)
    assert calls == []
    back = cpersist.load(path)
    for key in obj:
        assert back[key].dtype == obj[key].dtype and back[key].shape == obj[key].shape
        assert back[key].tobytes("A") == obj[key].tobytes("A")
    assert back["coef"].flags.f_contiguous
    sections = _reader(path.read_bytes()).sections
    assert len(sections) == 1 and sections[0].codec.codec_id == "zstd-auto"


def test_what_compresses_well_or_needs_a_section_is_written_the_general_way(tmp_path):
    path = tmp_path / "g.cp"
    table = {i: "value %d" % (i % 10) for i in range(3000)}
    cpersist.dump(table, path, compress=3)
    assert os.path.getsize(path) < len(pickle.dumps(table)) / 3
    assert cpersist.load(path) == table
    arr = np.arange(RAW_INLINE_BELOW // 8, dtype="<f8")  # raw: an array this large is a section
    cpersist.dump({"a": arr}, path)
    assert len(_reader(path.read_bytes()).sections) == 2
    np.testing.assert_array_equal(cpersist.load(path, mmap_mode="r")["a"], arr)
    large = ["x" * 100] * 1000 + [str(i) for i in range(_writer.SMALL_STREAM // 4)]
    cpersist.dump(large, path)
    assert len(path.read_bytes()) > _writer.SMALL_STREAM
    assert cpersist.load(path) == large


def test_a_small_object_to_a_file_object_is_compact_too():
    out = io.BytesIO()
    cpersist.dump(SMALL, out, compress=3)
    cpersist.dump([1, 2], out)
    out.seek(0)
    assert cpersist.load(out) == SMALL and cpersist.load(out) == [1, 2]
    assert out.tell() == len(out.getvalue()) == 2 * OVERHEAD + len(pickle.dumps(SMALL)) + len(
        pickle.dumps([1, 2]))


def test_damaged_or_extended_compact_files_are_reported_by_the_general_reader(tmp_path):
    path = tmp_path / "d.cp"
    cpersist.dump(SMALL, path)
    good = path.read_bytes()
    damaged = bytearray(good)
    damaged[OVERHEAD - 40] ^= 1  # in the pickle stream
    path.write_bytes(bytes(damaged))
    with pytest.raises(cpersist.CorruptFileError, match="checksum"):
        cpersist.load(path)
    path.write_bytes(good + b"\0" * 5)
    with pytest.raises(cpersist.CorruptFileError, match="5 bytes"):
        cpersist.load(path)
    path.write_bytes(good[:-1])
    with pytest.raises(cpersist.CorruptFileError):
        cpersist.load(path)


def test_a_damaged_data_record_header_is_refused_by_load_and_loads_alike(tmp_path):
    """Each byte of a compact dump's DATA record header (after the 64-byte
    header) changed in turn: ``loads`` (trusted, restricted, restricted
    under limits) and ``load`` (a path, trusted or not, and a file object,
    which walks the records) refuse it with the same exception, for a stream
    the restricted quick path takes framed, one it takes unframed
    (protocol 2), and one past what ``loads`` copies (viewed)."""
    path = tmp_path / "d.cp"
    loads = {"loads": cpersist.loads,
             "loads restricted": lambda d: cpersist.loads(d, trusted=False),
             "loads limited": lambda d: cpersist.loads(d, trusted=False, limits={}),
             "load path": lambda d: path.write_bytes(d) and cpersist.load(path),
             "load path restricted": lambda d: path.write_bytes(d) and cpersist.load(
                 path, trusted=False),
             "load file object": lambda d: cpersist.load(io.BytesIO(d))}

    def outcome(load, data):
        try:
            return load(data)
        except Exception as exc:  # noqa: BLE001 - the outcome compared
            return type(exc)

    for obj, protocol in [({"a": 1, "b": 2.0, "c": "x"}, 5), (SMALL, 2),
                          (list(range(40000)), 5)]:
        data = cpersist.dumps(obj, protocol=protocol)
        assert {name: outcome(load, data) for name, load in loads.items()} == dict.fromkeys(
            loads, obj)
        for at in range(64, 72):
            for change in (0x01, 0x41, 0x80, 0xFF):
                damaged = bytearray(data)
                damaged[at] ^= change
                damaged = bytes(damaged)
                outcomes = {name: outcome(load, damaged) for name, load in loads.items()}
                refused = outcomes["load file object"]
                assert isinstance(refused, type) and issubclass(
                    refused, cpersist.CorruptFileError), (at, change, outcomes)
                assert outcomes == dict.fromkeys(loads, refused), (at, change)


def test_dumps_keeps_a_pickler_per_thread_only_after_small_objects():
    """Its memo is cleared at every call, at a cost that grows with the
    largest object it ever pickled: one that pickled a large object is dropped."""
    from cpersist import inmemory

    cpersist.dumps(SMALL)
    kept = inmemory._kept.picklers[pickle.HIGHEST_PROTOCOL]
    shared = [1, 2]
    assert cpersist.loads(cpersist.dumps([shared, shared])) == [[1, 2], [1, 2]]
    assert inmemory._kept.picklers[pickle.HIGHEST_PROTOCOL] is kept
    large = {str(i): i for i in range(20000)}
    assert cpersist.loads(cpersist.dumps(large)) == large
    assert pickle.HIGHEST_PROTOCOL not in inmemory._kept.picklers
    assert cpersist.loads(cpersist.dumps(SMALL)) == SMALL


def test_dumps_inside_dumps_and_failed_dumps_leave_it_working():
    class Nested:
        def __reduce__(self):
            return cpersist.loads, (cpersist.dumps([1, np.arange(3)]),)

    class Broken:
        def __reduce__(self):
            raise TypeError("cannot pickle Broken")

    back = cpersist.loads(cpersist.dumps({"n": Nested(), "a": np.ones(2)}))
    assert back["n"][0] == 1 and back["n"][1].tolist() == [0, 1, 2]
    assert back["a"].tolist() == [1.0, 1.0]
    with pytest.raises(TypeError, match="cannot pickle Broken"):
        cpersist.dumps([SMALL, Broken()])
    assert cpersist.loads(cpersist.dumps(SMALL)) == SMALL
    assert cpersist.dumps(SMALL) == cpersist.dumps(dict(SMALL))  # no memo left between calls


class _CountsPickling:
    pickled = 0

    def __reduce__(self):
        type(self).pickled += 1
        return _CountsPickling, ()


@pytest.mark.parametrize("compress", [0, 3])
@pytest.mark.parametrize("target", ["path", "file object", "bytes"])
def test_an_object_turning_out_large_is_pickled_once(tmp_path, compress, target):
    """The dump starts in memory and becomes sectioned at the first array
    that needs a section: what was pickled before it is not pickled again."""
    obj = {"first": _CountsPickling(), "weights": np.arange(100_000.0), "last": _CountsPickling()}
    _CountsPickling.pickled = 0
    if target == "path":
        cpersist.dump(obj, tmp_path / "m.cp", compress=compress)
        data = (tmp_path / "m.cp").read_bytes()
    elif target == "file object":
        with open(tmp_path / "m.cp", "wb") as file:
            cpersist.dump(obj, file, compress=compress)
        data = (tmp_path / "m.cp").read_bytes()
    else:
        data = cpersist.dumps(obj, compress=compress)
    assert _CountsPickling.pickled == 2
    assert len(_reader(data).sections) == 2
    back = cpersist.loads(data)
    assert type(back["first"]) is _CountsPickling and type(back["last"]) is _CountsPickling
    assert back["weights"].tobytes() == obj["weights"].tobytes()
