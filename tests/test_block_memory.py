"""Block memory: arrays whose pages are used again once no view of them is left."""

import gc
import os
import threading

import numpy as np
import pytest

import cpersist
from cpersist.lazy.block_memory import BlockMemory

MB = 1 << 20


def _address(arr):
    return arr.__array_interface__["data"][0]


@pytest.mark.parametrize("dtype", ["<f8", ">i4", "u1", "c16", [("a", "<i2"), ("b", "f4")]])
@pytest.mark.parametrize("shape", [(MB,), (512, 1024), (64, 64, 65)])
def test_blocks_are_like_numpy_empty(shape, dtype):
    memory = BlockMemory(keep_bytes=64 * MB, smallest=MB)
    arr = memory.empty(shape, dtype)
    assert arr.shape == shape and arr.dtype == np.dtype(dtype)
    assert arr.flags.c_contiguous and arr.flags.writeable and arr.flags.aligned
    arr.view(np.uint8)[...] = 7  # every byte writable
    assert (arr.view(np.uint8) == 7).all()


def test_small_arrays_are_plain_numpy():
    memory = BlockMemory(keep_bytes=64 * MB, smallest=MB)
    arr = memory.empty((10, 10), np.float64)
    assert arr.flags.owndata and arr.base is None
    del arr
    assert memory._kept_bytes == 0


def test_pages_come_back_only_when_the_last_view_is_gone():
    memory = BlockMemory(keep_bytes=64 * MB, smallest=MB)
    block = memory.empty((1024, 1024), np.float32)
    address = _address(block)
    view = block[::3, 5:]
    as_bytes = memoryview(block)
    del block
    gc.collect()
    assert memory._kept_bytes == 0  # a view and a memoryview still use it
    view[0, 0] = 42.0
    del view
    assert memory._kept_bytes == 0
    again = np.asarray(as_bytes)
    del as_bytes
    assert memory._kept_bytes == 0 and again[0, 5] == 42.0
    del again
    assert memory._kept_bytes == 4 * MB
    # The next block of that size (or up to twice smaller) reuses it.
    reused = memory.empty((3 * MB,), np.uint8)
    assert _address(reused) == address and memory._kept_bytes == 0
    other = memory.empty((1024, 1024), np.float32)
    assert _address(other) != address


def test_kept_memory_is_bounded():
    memory = BlockMemory(keep_bytes=10 * MB, smallest=MB)
    blocks = [memory.empty((4 * MB,), np.uint8) for _ in range(4)]
    del blocks
    assert memory._kept_bytes == 8 * MB and len(memory._free) == 2
    big = memory.empty((16 * MB,), np.uint8)  # more than is kept: not kept
    del big
    assert memory._kept_bytes <= 10 * MB


def test_threads_taking_and_dropping_blocks_never_share_one():
    memory = BlockMemory(keep_bytes=16 * MB, smallest=MB)
    errors = []

    def work(tag):
        try:
            for _ in range(200):
                block = memory.empty((MB,), np.uint8)
                block[...] = tag
                view = block[::7]
                del block
                if not (view == tag).all():
                    errors.append(tag)
                del view
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(tag,)) for tag in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert memory._kept_bytes <= 16 * MB


def test_to_dask_blocks_reuse_memory(tmp_path, monkeypatch):
    dask = pytest.importorskip("dask")
    from cpersist.lazy import array as lazy_module

    arr = np.cumsum(np.ones((4000, 1000), np.int32), axis=0, dtype=np.int32)  # 16 MB
    path = tmp_path / "blocks.cp"
    cpersist.dump({"a": arr}, path, compress=3, chunk_size=MB)
    with cpersist.open(path) as f:
        x = f.arrays["obj['a']"].to_dask(chunks=(500, 1000))
    assert x.numblocks == (8, 1)
    # A pool of its own: blocks other tests dropped do not come into it.
    memory = BlockMemory(keep_bytes=256 * MB, smallest=MB)
    monkeypatch.setattr(lazy_module, "BLOCK_MEMORY", memory)
    with dask.config.set(scheduler="synchronous"):
        assert int(x.sum(dtype=np.int64).compute()) == int(arr.sum(dtype=np.int64))
    gc.collect()
    # Every block is gone, so every map made is back in the pool: fewer maps
    # than blocks, each one block's size.
    assert 1 <= len(memory._free) < 8
    assert all(len(buffer) == 500 * 1000 * 4 for buffer in memory._free)
    with dask.config.set(scheduler="threads"):
        got = x.compute()
    np.testing.assert_array_equal(got, arr)
    assert got.dtype == arr.dtype and got.flags.writeable


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_forked_child_writes_its_own_copy():
    memory = BlockMemory(keep_bytes=64 * MB, smallest=MB)
    block = memory.empty((MB,), np.uint8)
    block[...] = 1
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        block[...] = 2
        again = memory.empty((MB,), np.uint8)  # the pool's lock works in the child
        again[...] = 3
        os._exit(0 if (block == 2).all() else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (block == 1).all()
