"""The ``"cpersist"`` store backend of joblib.Memory, through a real joblib.Memory.

Cached outputs are cpersist files in joblib's layout: a second call loads
instead of computing, ``mmap_mode`` maps raw outputs, ``clear``,
``reduce_size`` and ``call_and_shelve`` work, two processes filling the same
entry at once leave a valid file, and ``import cpersist`` does not import
joblib.
"""

import multiprocessing
import os
import pickle
import time
import warnings

import numpy as np
import pytest

import joblib
from joblib._store_backends import CacheWarning

import cpersist
from cpersist.container import MAGIC

from ._fresh import ROOT, run_code
from .conftest import assert_same, random_array


@pytest.fixture(autouse=True)
def backend():
    return cpersist.register_joblib_backend()


def make_output(n):
    """An object with arrays above and below the inline size, both orders."""
    return {
        "big": random_array(np.float64, (n, 64), seed=n),       # a section of its own
        "fortran": random_array(np.int16, (300, 120), order="F", seed=1),
        "small": np.arange(10, dtype=np.uint8),                   # inline when compressed
        "name": f"output {n}",
        "list": [np.float32(1.5), (1, 2.0)],
    }


def output_file(memory, func, *args):
    """The path of the cached output of ``func(*args)``."""
    return os.path.join(memory.store_backend.location, func.func_id, func._get_args_id(*args),
                        "output.pkl")


def cached(memory, calls):
    def compute(n):
        calls.append(n)
        return make_output(n)
    return memory.cache(compute)


@pytest.mark.parametrize("compress, codec, level", [
    (0, None, None), (False, None, None), (3, "zstd-auto", 3), (True, "zstd-auto", 3),
    (("lz4", 5), "lz4", 5), ("zlib", "zlib", 3), (("zstd", 0), None, None),
    # joblib's own codec names
    ("gzip", "gzip", 3), (("bz2", 9), "bz2", 9), (("lzma", 6), "lzma", 6), ("xz", "xz", 3),
])
def test_cached_output_is_a_cpersist_file_loaded_on_the_second_call(tmp_path, compress,
                                                                       codec, level):
    memory = joblib.Memory(tmp_path, backend="cpersist", compress=compress, verbose=0)
    calls = []
    func = cached(memory, calls)
    first = func(500)
    second = func(500)
    assert calls == [500]
    assert_same(make_output(500), first)
    assert_same(make_output(500), second)
    path = output_file(memory, func, 500)
    with open(path, "rb") as file:
        assert file.read(len(MAGIC)) == MAGIC
    info = cpersist.inspect(path)
    big = [a for a in info["arrays"] if a["shape"] == (500, 64)]
    assert len(big) == 1
    assert big[0]["codec"] == codec
    if codec is not None:
        assert big[0]["level"] == level
    cpersist.verify(path)
    # no temporary file of joblib's or cpersist's is left beside it
    assert sorted(os.listdir(os.path.dirname(path))) == ["metadata.json", "output.pkl"]


@pytest.mark.parametrize("compress", ["brotli", 10, ("zstd", 11), "no-such-codec"])
def test_bad_compress_fails_when_the_memory_is_made(tmp_path, compress):
    with pytest.raises(ValueError, match="invalid compress"):
        joblib.Memory(tmp_path, backend="cpersist", compress=compress, verbose=0)


def test_bad_mmap_mode_fails_when_the_memory_is_made(tmp_path):
    with pytest.raises(ValueError, match="mmap_mode None, 'r', 'r\\+' or 'c'; got 'w\\+'"):
        joblib.Memory(tmp_path, backend="cpersist", mmap_mode="w+", verbose=0)


def test_raw_output_is_memory_mapped(tmp_path):
    memory = joblib.Memory(tmp_path, backend="cpersist", mmap_mode="r", verbose=0)
    calls = []
    func = cached(memory, calls)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        results = [func(400), func(400)]
    assert calls == [400]
    for result in results:  # joblib maps the first call's output too
        assert type(result["big"]) is np.memmap
        assert type(result["fortran"]) is np.memmap
        assert not result["big"].flags.writeable
        assert_same(make_output(400), result, mmap=True)


def test_compressed_output_with_mmap_mode_warns_once_per_load(tmp_path):
    with pytest.warns(UserWarning, match="cannot be memmapped"):
        memory = joblib.Memory(tmp_path, backend="cpersist", compress=3, mmap_mode="r",
                               verbose=0)
    func = cached(memory, [])
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = func(300)
        messages = [str(w.message) for w in caught]
        assert len(messages) == 1, messages
        assert caught[0].category is UserWarning
        assert "holds compressed arrays, which cannot be memory-mapped" in messages[0]
        assert output_file(memory, func, 300) in messages[0]
        assert type(result["big"]) is np.ndarray
        assert_same(make_output(300), result)


def test_clear(tmp_path):
    memory = joblib.Memory(tmp_path, backend="cpersist", compress=3, verbose=0)
    calls = []
    func = cached(memory, calls)
    func(100)
    path = output_file(memory, func, 100)
    assert os.path.exists(path)
    memory.clear(warn=False)
    assert not os.path.exists(path)
    assert_same(make_output(100), func(100))
    assert calls == [100, 100]


def test_reduce_size_counts_the_cpersist_files(tmp_path):
    memory = joblib.Memory(tmp_path, backend="cpersist", verbose=0)
    calls = []
    func = cached(memory, calls)
    for n in (1000, 1001, 1002):
        func(n)
        time.sleep(0.01)  # distinct access times
    items = memory.store_backend.get_items()
    assert len(items) == 3
    for item in items:  # joblib's size accounting sees the cpersist file
        files = [os.path.join(item.path, name) for name in ("output.pkl", "metadata.json")]
        assert item.size == sum(os.path.getsize(f) for f in files)
        assert item.size > 1000 * 64 * 8
    one = max(item.size for item in items)
    memory.reduce_size(bytes_limit=one + one // 2)
    left = memory.store_backend.get_items()
    assert len(left) == 1
    assert sum(item.size for item in left) <= one + one // 2
    kept = [n for n in (1000, 1001, 1002) if func.check_call_in_cache(n)]
    assert len(kept) == 1
    assert_same(make_output(kept[0]), func(kept[0]))
    assert calls == [1000, 1001, 1002]


@pytest.mark.parametrize("mmap_mode", [None, "r"])
def test_call_and_shelve(tmp_path, mmap_mode):
    memory = joblib.Memory(tmp_path, backend="cpersist", mmap_mode=mmap_mode, verbose=0)
    calls = []
    func = cached(memory, calls)
    shelved = func.call_and_shelve(200)
    again = func.call_and_shelve(200)
    assert calls == [200]
    assert isinstance(shelved, joblib.memory.MemorizedResult)
    for result in (shelved.get(), again.get(), pickle.loads(pickle.dumps(shelved)).get()):
        assert (type(result["big"]) is np.memmap) == (mmap_mode == "r")
        assert_same(make_output(200), result, mmap=True)
    shelved.clear()
    with pytest.raises(KeyError, match="Non-existing item"):
        again.get()


def test_reads_an_entry_written_by_joblibs_default_store(tmp_path):
    calls = []
    cached(joblib.Memory(tmp_path, compress=3, verbose=0), calls)(50)
    memory = joblib.Memory(tmp_path, backend="cpersist", verbose=0)
    assert_same(make_output(50), cached(memory, calls)(50))
    assert calls == [50]


def unpicklable(n):
    return [np.arange(n), lambda: n]


def test_unpicklable_output_is_returned_and_not_cached(tmp_path):
    memory = joblib.Memory(tmp_path, backend="cpersist", verbose=0)
    func = memory.cache(unpicklable)
    with pytest.warns(CacheWarning, match="cpersist could not write .*output.pkl"):
        result = func(5)
    assert_same(np.arange(5), result[0])
    assert result[1]() == 5
    item = os.path.dirname(output_file(memory, func, 5))
    assert not func.check_call_in_cache(5)
    assert [name for name in os.listdir(item) if name != "metadata.json"] == []


def test_memory_pickled_to_a_fresh_process_needs_no_registration(tmp_path):
    memory = joblib.Memory(tmp_path, backend="cpersist", compress=3, verbose=0)
    func = memory.cache(slow_volume)
    expected = func(7, 0.0)
    script = (
        "import pickle, sys, numpy as np\n"
        "func = pickle.loads(sys.stdin.buffer.read())\n"
        "assert 'cpersist' not in __import__('joblib').memory._STORE_BACKENDS\n"
        "assert type(func.store_backend).__name__ == 'CpersistStoreBackend'\n"
        "sys.stdout.buffer.write(func(7, 0.0).tobytes())\n"
    )
    result = run_code(script, input=pickle.dumps(func), text=False, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout == expected.tobytes()


# -- two processes filling the same entry ----------------------------------------

def slow_volume(seed, delay):
    """A deterministic 8 MB array, computed slowly enough for the calls to overlap."""
    time.sleep(delay)
    return np.cumsum(np.random.default_rng(seed).standard_normal((32, 256, 256),
                                                                  dtype=np.float32), axis=0)


def fill_cache(location, compress, barrier, queue):
    try:
        cpersist.register_joblib_backend()
        memory = joblib.Memory(location, backend="cpersist", compress=compress, verbose=0)
        func = memory.cache(slow_volume)
        barrier.wait(timeout=60)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = [func(seed, 0.3) for seed in (1, 2)]
        same = all(np.array_equal(r, slow_volume(s, 0)) for r, s in zip(results, (1, 2)))
        queue.put((same, [f"{w.category.__name__}: {w.message}" for w in caught]))
    except BaseException as exc:  # reported to the parent, which fails the test
        queue.put((False, [repr(exc)]))


@pytest.mark.parametrize("compress", [0, 3])
def test_two_processes_fill_the_same_entry(tmp_path, compress):
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=fill_cache, args=(str(tmp_path), compress, barrier, queue))
             for _ in range(2)]
    for proc in procs:
        proc.start()
    reports = [queue.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    queue.close()
    queue.join_thread()
    assert reports == [(True, []), (True, [])]
    memory = joblib.Memory(str(tmp_path), backend="cpersist", compress=compress, verbose=0)
    func = memory.cache(slow_volume)
    for seed in (1, 2):
        path = output_file(memory, func, seed, 0.3)
        cpersist.verify(path)
        assert sorted(os.listdir(os.path.dirname(path))) == ["metadata.json", "output.pkl"]
        assert func.check_call_in_cache(seed, 0.3)
        assert_same(slow_volume(seed, 0), func(seed, 0.3))


# -- joblib is optional -----------------------------------------------------------

def test_import_cpersist_does_not_import_joblib():
    script = "import sys, cpersist; print('joblib' in sys.modules)"
    result = run_code(script, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_without_joblib_registering_names_the_install_command():
    # sys.modules[name] = None makes "import joblib" fail as if not installed.
    script = (
        "import sys; sys.modules['joblib'] = None\n"
        "import cpersist\n"
        "try:\n"
        "    cpersist.register_joblib_backend()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    result = run_code(script, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "needs joblib" in result.stdout
    assert "pip install joblib" in result.stdout
