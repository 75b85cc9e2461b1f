"""cpersist.RowBatches: an array given as an iterable of row batches, stored
as the section of the array they concatenate to (the same bytes), reading
one batch at a time; loaded back as a numpy array."""

import os
import pickle
import weakref

import numpy as np
import pytest

import cpersist
from tests.conftest import assert_same

RNG = np.random.default_rng(52)

#: Batches the writer must put in C order, one after the other: equal and
#: unequal lengths with empty ones among them, Fortran-ordered and strided
#: batches, rows longer than a chunk, 1-d batches, structured items, an
#: empty array.
CASES = {
    "rows": lambda: [RNG.random((97, 37)) for _ in range(11)],
    "unequal": lambda: [RNG.integers(0, 9, (n, 11), dtype=np.int16) for n in (5, 300, 0, 1, 394)],
    "fortran": lambda: [np.asfortranarray(RNG.random((77, 40))) for _ in range(7)],
    "strided": lambda: [RNG.random((130, 3, 20))[::2, :, ::3] for _ in range(5)],
    "long_rows": lambda: [RNG.random((1, 5000)) for _ in range(3)],
    "1d": lambda: [np.arange(n, n + 3333, dtype=np.int64) for n in range(0, 100000, 3333)],
    "structured": lambda: [np.array([(i, j * 0.5) for j in range(400)], dtype="i4,f8")
                           for i in range(6)],
    "empty": lambda: [np.zeros((0, 5))],
}


@pytest.mark.parametrize("compress", [0, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_row_batches_dump_as_their_numpy_array(tmp_path, case, compress):
    """The file is byte for byte the dump of the concatenated array, with
    chunks smaller than the batches and larger ones, and loads as it (with
    and without trust, and lazily)."""
    batches = CASES[case]()
    expected = np.ascontiguousarray(np.concatenate(batches))
    for chunk_size in (4096, 1 << 20):
        rows = cpersist.RowBatches(iter(batches), expected.shape, expected.dtype)
        cpersist.dump({"x": rows, "again": [rows], "n": 1}, tmp_path / "rows.cp",
                      compress=compress, chunk_size=chunk_size)
        cpersist.dump({"x": expected, "again": [expected], "n": 1}, tmp_path / "numpy.cp",
                      compress=compress, chunk_size=chunk_size)
        assert (tmp_path / "rows.cp").read_bytes() == (tmp_path / "numpy.cp").read_bytes()
        loaded = cpersist.load(tmp_path / "rows.cp")
        assert_same({"x": expected, "again": [expected], "n": 1}, loaded)
        assert loaded["again"][0] is loaded["x"]
    assert_same({"x": expected, "again": [expected], "n": 1},
                cpersist.load(tmp_path / "rows.cp", trusted=False))
    if expected.nbytes >= 1 << 16:
        with cpersist.open(tmp_path / "rows.cp") as f:
            assert_same(expected, f.arrays["obj['x']"][:])


def test_row_batches_read_one_batch_at_a_time(tmp_path):
    """The batches are read while the section is written: no more than two
    are alive at once (the one being written and the one being made), with
    compression on the thread pool and without."""
    alive = []
    most = [0]

    def batches():
        for i in range(40):
            batch = np.full((2048, 64), i, dtype=np.float32)  # 512 KiB
            alive.append(weakref.ref(batch))
            most[0] = max(most[0], sum(ref() is not None for ref in alive))
            yield batch
            del batch

    for compress in (0, 3):
        alive.clear()
        most[0] = 0
        rows = cpersist.RowBatches(batches(), (40 * 2048, 64), np.float32)
        cpersist.dump({"x": rows}, tmp_path / "x.cp", compress=compress, chunk_size=1 << 16)
        assert most[0] <= 2
        expected = np.repeat(np.arange(40, dtype=np.float32), 2048)[:, None].repeat(64, 1)
        assert_same({"x": expected}, cpersist.load(tmp_path / "x.cp"))


def test_row_batches_not_as_said(tmp_path):
    """A batch of another dtype or row shape, too many or too few rows, or
    batches read by an earlier dump stop the dump with RowBatchesError, and
    nothing is left at its path; a plain pickler refuses a RowBatches."""
    def ones(n, shape=(100, 10), dtype=np.float64):
        return (np.ones(shape, dtype) for _ in range(n))

    cases = lambda: [  # noqa: E731
        (cpersist.RowBatches(ones(3, dtype=np.float32), (300, 10), np.float64),
         "is of dtype float32, not float64"),
        (cpersist.RowBatches(ones(3, shape=(100, 11)), (300, 10), np.float64),
         r"has shape \(100, 11\)"),
        (cpersist.RowBatches(ones(4), (300, 10), np.float64), "more than 300 rows"),
        (cpersist.RowBatches(ones(2), (300, 10), np.float64), "hold 200 rows, not 300"),
    ]
    for compress in (0, 3):
        for rows, message in cases():
            with pytest.raises(cpersist.RowBatchesError, match=message):
                cpersist.dump({"x": rows}, tmp_path / "a.cp", compress=compress)
            assert os.listdir(tmp_path) == []
    rows = cpersist.RowBatches(ones(3), (300, 10), np.float64)
    cpersist.dump({"x": rows}, tmp_path / "a.cp")
    with pytest.raises(cpersist.RowBatchesError, match="read already"):
        cpersist.dump({"x": rows}, tmp_path / "b.cp")
    with pytest.raises(cpersist.RowBatchesError, match="read already"):
        cpersist.dump({"x": cpersist.RowBatches(ones(3), (300, 10), np.float64)},
                      tmp_path / "b.cp", compress="max")
    assert os.listdir(tmp_path) == ["a.cp"]
    with pytest.raises(TypeError, match="written by cpersist.dump"):
        pickle.dumps(cpersist.RowBatches(ones(1), (100, 10), np.float64))
    with pytest.raises(cpersist.RowBatchesError, match="Python objects"):
        cpersist.RowBatches([], (0,), object)
