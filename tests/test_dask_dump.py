"""dask arrays inside a dumped object: stored as the sections of the numpy
arrays they compute to (the same bytes), computed by the scheduler in force,
block by block; loaded back as numpy arrays, or lazily."""

import os

import dask
import dask.array as da
import numpy as np
import pytest

import cpersist
from tests.conftest import assert_same

RNG = np.random.default_rng(51)

#: Block layouts the writer must put in C order: blocks along the first axis
#: only, a grid of blocks, Fortran-ordered blocks, a transposed array (whose
#: blocks are Fortran-ordered views), irregular blocks, rows longer than a
#: chunk, 1-d, 0-d and empty arrays.
CASES = {
    "rows": lambda: da.from_array(RNG.random((1000, 37)), chunks=(97, 37)),
    "grid": lambda: da.from_array(RNG.random((300, 50, 7)), chunks=(33, 20, 3)),
    "fortran": lambda: da.from_array(np.asfortranarray(RNG.random((500, 40))), chunks=(77, 40)),
    "transposed": lambda: da.from_array(RNG.random((60, 900)), chunks=(13, 100)).T,
    "irregular": lambda: da.from_array(RNG.integers(0, 9, (700, 11), dtype=np.int16),
                                       chunks=((5, 300, 0, 1, 394), (4, 7))),
    "long_rows": lambda: da.from_array(RNG.random((3, 5000)), chunks=(1, 700)),
    "1d": lambda: da.arange(100000, chunks=3333),
    "0d": lambda: da.from_array(np.float32(3.5)),
    "empty": lambda: da.zeros((0, 5), chunks=(1, 5)),
}


@pytest.mark.parametrize("compress", [0, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_dask_array_dumps_as_its_numpy_array(tmp_path, case, compress):
    """The file is byte for byte the dump of the computed array (in C
    order), with chunks smaller than the blocks and larger ones, and loads
    as that numpy array."""
    x = CASES[case]()
    expected = np.asarray(x.compute(), order="C")
    for chunk_size in (4096, 1 << 20):
        cpersist.dump({"x": x, "n": 1}, tmp_path / "dask.cp", compress=compress,
                      chunk_size=chunk_size)
        cpersist.dump({"x": expected, "n": 1}, tmp_path / "numpy.cp", compress=compress,
                      chunk_size=chunk_size)
        assert (tmp_path / "dask.cp").read_bytes() == (tmp_path / "numpy.cp").read_bytes()
        assert_same({"x": expected, "n": 1}, cpersist.load(tmp_path / "dask.cp"))
    assert_same({"x": expected, "n": 1}, cpersist.load(tmp_path / "dask.cp", trusted=False))


def test_dask_array_opens_lazily(tmp_path):
    """cpersist.open gives the stored array lazily, and its to_dask() a
    dask array again; the same dask array twice is stored once."""
    x = da.from_array(RNG.random((4000, 16)), chunks=(600, 8))
    cpersist.dump({"a": x, "b": [x]}, tmp_path / "x.cp", compress=3, chunk_size=1 << 15)
    with cpersist.open(tmp_path / "x.cp") as f:
        assert sorted(f.arrays) == ["obj['a']"]
        back = f.arrays["obj['a']"].to_dask()
        assert isinstance(back, da.Array)
        assert_same(x.compute(), back.compute())
    loaded = cpersist.load(tmp_path / "x.cp")
    assert loaded["a"] is loaded["b"][0]


def test_dask_array_in_memory_dumps(tmp_path):
    x = da.from_array(RNG.random((300, 40)), chunks=(70, 40))
    assert_same({"x": x.compute()}, cpersist.loads(cpersist.dumps({"x": x})))


def test_dask_array_computed_on_the_cluster(tmp_path, dask_client):
    """With a distributed client in use, the blocks are computed by its
    workers (each block holds the pid of the process that made it); as the
    scheduler runs in this process, the client gathers them from the
    workers, never through the scheduler (which would hold a second copy of
    each band here)."""
    def pid_block(block):
        return np.full(block.shape, os.getpid(), dtype=np.int64)

    template = da.zeros((6000, 50), chunks=(500, 25), dtype=np.int64)
    pids = template.map_blocks(pid_block, dtype=np.int64)
    values = da.from_array(RNG.random((6000, 50)), chunks=(500, 50)) * 2
    scheduler = dask_client.cluster.scheduler
    through_scheduler = []
    gather = scheduler.handlers["gather"]

    def counted_gather(*args, **kwargs):
        through_scheduler.append(kwargs.get("keys"))
        return gather(*args, **kwargs)

    scheduler.handlers["gather"] = counted_gather
    try:
        cpersist.dump({"pids": pids, "values": values}, tmp_path / "c.cp", compress=3,
                      chunk_size=1 << 16)
    finally:
        scheduler.handlers["gather"] = gather
    assert through_scheduler == []
    loaded = cpersist.load(tmp_path / "c.cp")
    workers = set(dask_client.run(os.getpid).values())
    assert set(np.unique(loaded["pids"]).tolist()) <= workers
    assert os.getpid() not in workers
    assert_same(np.ascontiguousarray(values.compute(scheduler="sync")), loaded["values"])


def test_blocks_not_as_the_dask_array_says(tmp_path):
    """A block of another dtype or shape than the dask array says stops the
    dump, as does an error computing a block (raised as it is, though the
    array's graph holds a function pickle cannot name); nothing is left at
    the dump's path."""
    wrong_dtype = da.ones((4000, 10), chunks=(1000, 10)).map_blocks(
        lambda b: b.astype(np.float32), dtype=np.float64)
    with pytest.raises(cpersist.DaskArrayError, match="computed to an array of float32"):
        cpersist.dump({"x": wrong_dtype}, tmp_path / "a.cp", compress=3)
    wrong_shape = da.ones((4000, 10), chunks=(1000, 10)).map_blocks(lambda b: b[:-1])
    with pytest.raises(cpersist.DaskArrayError, match=r"computed to 319680 bytes, not 320000"):
        cpersist.dump({"x": wrong_shape}, tmp_path / "a.cp")
    def fails(block):
        raise TypeError("the block's own error")

    failing = da.ones((4000, 10), chunks=(1000, 10)).map_blocks(
        lambda b: fails(b) if b.size else b, dtype=np.float64)
    with pytest.raises(TypeError, match="the block's own error"):
        cpersist.dump({"x": failing}, tmp_path / "a.cp", compress=3)
    unknown = da.arange(100000, chunks=1000)
    with pytest.raises(cpersist.DaskArrayError, match="compute_chunk_sizes"):
        cpersist.dump({"x": unknown[unknown % 3 == 0]}, tmp_path / "a.cp")
    assert os.listdir(tmp_path) == []


def test_scheduler_in_force_is_used(tmp_path):
    """dask's own setting of the scheduler is followed (here the
    synchronous one, which computes on the calling thread's context)."""
    seen = []

    def record(block):
        seen.append(dask.config.get("scheduler", None))
        return block

    x = da.from_array(RNG.random((2000, 30)), chunks=(400, 30)).map_blocks(record)
    seen.clear()  # map_blocks ran it once, on an empty array, to find its dtype
    with dask.config.set(scheduler="sync"):
        cpersist.dump(x, tmp_path / "x.cp")
    assert seen == ["sync"] * 5
    assert_same(np.ascontiguousarray(x.compute()), cpersist.load(tmp_path / "x.cp"))
