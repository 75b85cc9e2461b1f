"""``compress="max"`` keeps the smallest of several layouts of an object:
every one must load exactly, and the choice must pay where it should."""

import io

import numpy as np
import pytest

import cpersist
from cpersist.pickling import write_max as _smallest

from .conftest import assert_same


def _f(a):
    return np.asfortranarray(a)


def _objects():
    rng = np.random.default_rng(7)
    walk = np.cumsum(rng.integers(-2, 3, (40, 30, 6, 2)), axis=3).astype(">i2")
    shared = rng.standard_normal((50, 20))
    plain = rng.integers(0, 9, (30, 40)).astype(np.float32)
    structured = np.zeros((6, 5), np.dtype({"names": ["a", "b"], "formats": ["u1", "<i4"],
                                            "offsets": [0, 8], "itemsize": 16}), order="F")
    np.ndarray((structured.nbytes,), np.uint8, buffer=structured)[:] = np.arange(
        structured.nbytes) % 251  # padding bytes too
    masked = np.ma.masked_array(_f(plain), mask=_f(plain > 4))
    return {
        "fortran volume": _f(walk),
        "same array twice": {"a": shared, "b": shared},
        "same data twice": {"a": shared, "b": shared.copy(), "t": "text"},
        "fortran twice": {"a": _f(shared), "b": [_f(shared)], "c": _f(shared)},
        "orders and dtypes": [
            _f(plain), plain, _f(rng.integers(0, 2, (7, 9)).astype(bool)),
            _f(rng.standard_normal((5, 4)) + 1j), _f(np.arange(12).astype("<M8[s]").reshape(3, 4)),
            _f(np.array([["ab", "c"], ["d", "efg"]], "<U3")),
            _f(np.arange(24, dtype=np.uint8).reshape(2, 3, 4).view("V2")),
            np.zeros((3, 0), order="F"), np.float64(3.5), np.array(7), plain[::2, ::3],
            _f(plain).T, structured,
        ],
        "object arrays": {"o": _f(np.array([[1, "a"], [None, 2.5]], dtype=object)),
                          "x": _f(plain)},
        "subclasses": {"m": masked, "mat": np.asmatrix(_f(plain))},
        "no arrays": {"k": list(range(50)), "s": {"x", "y"}, "b": b"\x00\xff"},
    }


OBJECTS = _objects()


@pytest.mark.parametrize("key", sorted(OBJECTS))
def test_max_round_trips_every_layout(key, tmp_path):
    obj = OBJECTS[key]
    path = tmp_path / "m.cp"
    cpersist.dump(obj, path, compress="max")
    # dumps and a file object get the same bytes as a path (compared before
    # loading: reading a masked array's fill_value sets it on the original)
    data = path.read_bytes()
    assert cpersist.dumps(obj, compress="max") == data
    out = io.BytesIO()
    cpersist.dump(obj, out, compress="max")
    assert out.getvalue() == data
    assert_same(obj, cpersist.load(path))
    assert_same(obj, cpersist.load(path, trusted=False))
    assert_same(obj, cpersist.loads(data))
    assert cpersist.verify(path)["sections"] >= 1
    with cpersist.open(path) as handle:
        assert_same(obj, handle.load())


def test_same_data_twice_costs_little_more_than_once(tmp_path):
    # Incompressible on its own: only a stream seeing both copies shrinks.
    data = np.random.default_rng(1).integers(0, 256, 300_000, dtype=np.uint8)
    once, twice = tmp_path / "once.cp", tmp_path / "twice.cp"
    cpersist.dump({"a": data}, once, compress="max")
    cpersist.dump({"a": data, "b": data.copy()}, twice, compress="max")
    assert twice.stat().st_size < once.stat().st_size * 1.05
    assert_same({"a": data, "b": data}, cpersist.load(twice))


def test_fortran_volume_is_stored_in_the_order_that_compresses_better(tmp_path):
    # Two nearly equal frames on the last axis: neighbours in C order only.
    rng = np.random.default_rng(3)
    frame = np.cumsum(rng.integers(-40, 41, (64, 48, 8)), axis=0).astype(np.int16)
    volume = _f(np.stack([frame, frame + rng.integers(-1, 2, frame.shape, np.int16)], axis=3))
    f_path, c_path = tmp_path / "f.cp", tmp_path / "c.cp"
    cpersist.dump(volume, f_path, compress="max")
    cpersist.dump(np.ascontiguousarray(volume), c_path, compress="max")
    # The Fortran array costs only the call that restores its order more.
    assert f_path.stat().st_size <= c_path.stat().st_size + 64
    loaded = cpersist.load(f_path, trusted=False)
    assert loaded.flags.f_contiguous
    assert_same(volume, loaded)
    assert "numpy.asfortranarray" in cpersist.inspect(f_path)["globals"]


def test_objects_over_the_bound_keep_a_section_per_array(tmp_path, monkeypatch):
    monkeypatch.setattr(_smallest, "WHOLE_STREAM_UP_TO", 100_000)
    obj = {"big": np.arange(20_000, dtype=np.int64), "small": np.arange(10.0),
           "fortran": _f(np.arange(20_000.0).reshape(100, 200))}
    path = tmp_path / "big.cp"
    cpersist.dump(obj, path, compress="max", chunk_size=1 << 16)
    arrays = cpersist.inspect(path)["arrays"]
    assert sorted((a["shape"], a["order"]) for a in arrays) == [((100, 200), "F"),
                                                                 ((20000,), "C")]
    assert all(a["codec"] == "max" for a in arrays)
    assert_same(obj, cpersist.load(path))


def test_whole_stream_is_refused_over_the_bound(monkeypatch):
    monkeypatch.setattr(_smallest, "WHOLE_STREAM_UP_TO", 10_000)
    assert _smallest.whole_stream(np.zeros(2_000), 5)[0] is None
    assert _smallest.whole_stream([np.zeros(1_000)] * 3, 5)[0] is not None  # stored once
    stream, fortran = _smallest.whole_stream(_f(np.zeros((20, 30))), 5)
    assert stream is not None and fortran
