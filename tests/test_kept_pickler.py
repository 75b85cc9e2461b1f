"""``dumps``, and ``dump`` for small objects, keep one pickler per thread
between calls: whatever it pickled before, and whatever was imported since
it was made, it writes the bytes a new pickler writes."""

import pickle

import numpy as np
import pytest

import cpersist
from cpersist import inmemory
from cpersist.pickling import dump as writer
from cpersist.pickling.array_pickler import ArrayPickler

from ._fresh import run_code

torch = pytest.importorskip("torch")


class _ReducesToArray:
    def __reduce__(self):
        return np.asarray, (np.arange(5.0),)


class _Point:
    def __init__(self, x):
        self.x = x

    def __eq__(self, other):
        return type(other) is _Point and other.x == self.x


def _objects():
    """Objects on both sides of "nothing but a pickle stream": plain data,
    arrays, numpy scalars and dtypes, tensors, PickleBuffers, objects whose
    reduce gives arrays, subclasses."""
    tensor = torch.arange(6.0).reshape(2, 3)
    return {
        "plain": {"people": [{"name": "Alice"}]},
        "class": [_Point(1), _Point(2)],
        "scalars": {"f": np.float64(0.5), "i": np.int32(3), "dtype": np.dtype("<f4")},
        "bytes": pickle.PickleBuffer(b"abcdef"),
        "array buffer": pickle.PickleBuffer(np.arange(4)),
        "array": {"w": np.arange(1000.0), "v": np.arange(3)},
        "object array": np.array([1, "a", np.arange(3)], dtype=object),
        "reduces to an array": _ReducesToArray(),
        "masked": np.ma.masked_array([1, 2, 3], mask=[0, 1, 0]),
        "tensor": {"t": tensor, "view": tensor[1]},
        "parameter": torch.nn.Parameter(torch.ones(3)),
        "tensor beside an array": {"a": np.zeros(6), "t": tensor},
    }


def _fresh_dumps(obj, **kwargs):
    vars(inmemory._kept).pop("picklers", None)
    return cpersist.dumps(obj, **kwargs)


@pytest.mark.parametrize("protocol", [None, 2])
def test_a_kept_pickler_writes_what_a_new_one_writes(protocol):
    objects = {name: obj for name, obj in _objects().items()
               if protocol is None or not isinstance(obj, pickle.PickleBuffer)}  # protocol 5 only
    fresh = {name: _fresh_dumps(obj, protocol=protocol) for name, obj in objects.items()}
    for _ in range(2):  # each dumped after every other, by the kept pickler
        for name, obj in objects.items():
            data = cpersist.dumps(obj, protocol=protocol)
            assert data == fresh[name], name
    back = cpersist.loads(fresh["tensor beside an array"])
    assert back["t"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert back["a"].tolist() == [0.0] * 6
    assert cpersist.loads(fresh["class"]) == objects["class"]


def _fresh_dump(obj, path, **kwargs):
    vars(writer._kept).pop("picklers", None)
    cpersist.dump(obj, path, **kwargs)
    return path.read_bytes()


@pytest.mark.parametrize("compress", [0, 3])
def test_a_kept_small_object_pickler_writes_what_a_new_one_writes(tmp_path, compress):
    """Including after one that stopped at an array needing a section."""
    objects = _objects()
    fresh = {name: _fresh_dump(obj, tmp_path / "fresh.cp", compress=compress)
             for name, obj in objects.items()}
    for names in (list(objects), list(objects)[::-1]):
        for name in names:
            cpersist.dump(objects[name], tmp_path / "kept.cp", compress=compress)
            assert (tmp_path / "kept.cp").read_bytes() == fresh[name], name


class _DumpsWhilePickled:
    """Dumps another small object to a file while it is pickled."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        cpersist.dump({"inner": [1, 2]}, self.path)
        return _DumpsWhilePickled, (self.path,)


def test_a_small_object_dumped_while_another_is_pickled(tmp_path):
    outer = {"outer": _DumpsWhilePickled(tmp_path / "inner.cp"), "n": [3]}
    cpersist.dump(outer, tmp_path / "outer.cp")
    back = cpersist.load(tmp_path / "outer.cp")
    assert type(back["outer"]) is _DumpsWhilePickled and back["n"] == [3]
    assert cpersist.load(tmp_path / "inner.cp") == {"inner": [1, 2]}
    assert (tmp_path / "outer.cp").read_bytes() == _fresh_dump(outer, tmp_path / "fresh.cp")


def test_a_pickler_made_before_torch_was_imported_stores_tensors():
    code = ("import cpersist, sys\n"
            "first = cpersist.dumps({'n': 1})\n"
            "assert 'torch' not in sys.modules\n"
            "import torch\n"
            "t = {'t': torch.arange(6.0)}\n"
            "kept = cpersist.dumps(t)\n"
            "from cpersist import inmemory\n"
            "inmemory._kept.picklers.clear()\n"
            "assert kept == cpersist.dumps(t)\n"
            "assert b'torch' not in kept\n"
            "assert cpersist.loads(kept, trusted=False)['t'].tolist() == list(range(6))\n")
    run_code(code, check=True)


def test_dumps_and_loads_frame_as_compact_dump_and_compact_stream(monkeypatch):
    """``dumps`` and ``loads`` write out the compact framing for speed:
    they write and accept exactly what compact_dump and compact_stream do,
    and leave everything else, damage included, to the general reader."""
    from cpersist.container.compact import COPY_UP_TO, OVERHEAD, compact_dump, compact_stream

    general = []
    real_load = inmemory.load_source
    monkeypatch.setattr(inmemory, "load_source", lambda *a, **kw: general.append(1) or real_load(*a, **kw))
    small = {"people": [{"name": "Alice"}]}
    large = list(range(COPY_UP_TO // 2))  # a stream past COPY_UP_TO: viewed, not copied
    for obj in (small, large, [bytearray(b"y" * 70000)]):
        stream = pickle.dumps(obj, protocol=5)
        data = cpersist.dumps(obj)
        assert data == compact_dump(stream)
        assert bytes(compact_stream(data)) == stream
        for form in (data, bytearray(data), memoryview(data), np.frombuffer(data, np.uint8)):
            assert cpersist.loads(form) == obj
        assert general == []
    assert len(cpersist.dumps(large)) - OVERHEAD > COPY_UP_TO
    data = cpersist.dumps(small)
    for at in [*range(16), *range(64, 72), *range(len(data) - 48, len(data))]:
        damaged = bytearray(data)
        damaged[at] ^= 1
        damaged = bytes(damaged)
        assert compact_stream(damaged) is None, at
        general.clear()
        try:
            back = cpersist.loads(damaged)
        except (cpersist.CorruptFileError, cpersist.UnsupportedVersionError):
            pass
        else:  # a bit the general reader ignores
            assert back == small, at
        assert general == [1], at


class _RecordingPickler(ArrayPickler):
    """Records the memo tables it is given in place of its own."""

    replaced = []

    @property
    def memo(self):
        return pickle.Pickler.memo.__get__(self)

    @memo.setter
    def memo(self, value):
        _RecordingPickler.replaced.append(len(value))
        pickle.Pickler.memo.__set__(self, value)


def test_a_memo_grown_by_a_longer_stream_is_replaced_not_cleared(tmp_path, monkeypatch):
    """Clearing walks the whole table, which keeps the size the largest
    object needed: after a longer stream the kept pickler gets a new table,
    and small objects pickled next clear a small one."""
    monkeypatch.setattr(inmemory, "ArrayPickler", _RecordingPickler)
    monkeypatch.setattr(writer, "ArrayPickler", _RecordingPickler)
    monkeypatch.delattr(inmemory._kept, "picklers", raising=False)
    monkeypatch.delattr(writer._kept, "picklers", raising=False)
    many = {str(i): [i] for i in range(100)}  # a 700-byte stream, 200 memo entries
    for dump in (cpersist.dumps, lambda obj: cpersist.dump(obj, tmp_path / "a.cp")):
        _RecordingPickler.replaced.clear()
        dump({"n": 1})
        assert _RecordingPickler.replaced == []
        dump(many)
        assert _RecordingPickler.replaced == [0]
        dump({"n": 2})
        assert _RecordingPickler.replaced == [0]
    assert cpersist.load(tmp_path / "a.cp") == {"n": 2}
