"""Shared helpers of the test suite: exact comparison and round-trip targets.

``assert_same(expected, actual)`` compares recursively and strictly: for numpy
arrays the type, dtype (``==``, ``.str``, ``.descr``, fields and metadata, so
byte order and field layout count), shape, memory order (a contiguous array
keeps its C or F order, a non-contiguous one comes back C-contiguous) and the
bytes themselves, plus mask, hard mask and fill value of masked arrays;
containers and plain class instances are walked into. Identity (the same
array referenced twice) is asserted by the tests themselves.

``roundtrip(obj, how, tmp_path, **dump_kwargs)`` dumps ``obj`` to a path, a
``pathlib.Path``, a ``BytesIO``, an open file or a pipe, and loads it back
from the same kind of source.

``spy_reads(monkeypatch)`` records every read from local files, through the
real source.

``dask_client`` (a module-scoped fixture) is a client of a
``distributed.LocalCluster`` of two worker processes on 127.0.0.1.

Every test must leave the trace function as it found it (an autouse check):
coverage traces through it, and a test that sets ``sys.settrace(None)``
silently stops the measurement of every later test in its process.
"""

import contextlib
import io
import os
import sys
import threading
import time
import warnings
from collections import namedtuple

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import cpersist

# Property tests: examples of any cost (a dump each) and no deadline, as the
# machine may be busy; on CI, the same examples every run (a failure there is
# reproducible) and no example database to keep.
settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", settings.get_profile("default"), derandomize=True, database=None,
                          print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "default")

#: Every way to compress: raw first, then every registered codec.
COMPRESSIONS = [0] + cpersist.available_codecs()
#: Dump targets / load sources exercised by :func:`roundtrip`.
TARGETS = ["path", "pathlib", "bytesio", "file", "pipe"]


@pytest.fixture(autouse=True)
def _trace_function_kept():
    found = sys.gettrace()
    yield
    assert sys.gettrace() == found, (
        f"the test left the trace function {sys.gettrace()!r}, not the one it found "
        f"({found!r}): put back what sys.gettrace() gave before calling sys.settrace")


def make_matrix(data):
    """An ``np.matrix`` without numpy's PendingDeprecationWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        return np.matrix(data)


# -- exact comparison --------------------------------------------------------

def _expected_type(expected):
    cls = type(expected)
    if cls is np.memmap:
        return np.ndarray  # a memmap is stored as its data: it loads as an ndarray
    return cls


def _raw_bytes(arr):
    """The array's bytes in C order, whatever its memory layout and subclass.

    Structured dtypes are compared field by field: copying a non-contiguous
    array does not copy the padding between fields, which holds no data.
    """
    arr = arr.view(np.ndarray)
    if arr.dtype.names:
        return [_raw_bytes(arr[name]) for name in arr.dtype.names]
    return np.ascontiguousarray(arr).view(np.uint8).tobytes()


def _memory_bytes(arr):
    """All bytes of a contiguous array in memory order, padding included."""
    return arr.view(np.ndarray).ravel(order="K").view(np.uint8).tobytes()


def _descr(dtype):
    try:
        return dtype.descr
    except ValueError:  # not defined for overlapping or out-of-order fields
        return None


def _assert_same_dtype(expected, actual, where):
    assert actual == expected, f"{where}: dtype {actual} != {expected}"
    assert actual.str == expected.str, f"{where}: dtype.str {actual.str} != {expected.str}"
    assert _descr(actual) == _descr(expected), f"{where}: descr {_descr(actual)}"
    assert actual.fields == expected.fields, f"{where}: fields {actual.fields}"
    assert actual.itemsize == expected.itemsize, f"{where}: itemsize"
    assert actual.type is expected.type, f"{where}: dtype.type {actual.type} != {expected.type}"
    assert actual.metadata == expected.metadata, f"{where}: dtype.metadata {actual.metadata}"
    assert actual.isalignedstruct == expected.isalignedstruct, f"{where}: isalignedstruct"
    if expected.subdtype is not None:
        _assert_same_dtype(expected.subdtype[0], actual.subdtype[0], f"{where}.base")
    for name in expected.names or ():
        _assert_same_dtype(expected.fields[name][0], actual.fields[name][0],
                           f"{where}[{name!r}]")


def _assert_same_array(expected, actual, where, mmap):
    exp_type = _expected_type(expected)
    act_type = type(actual)
    if mmap and exp_type is np.ndarray and act_type is np.memmap:
        act_type = np.ndarray
    assert act_type is exp_type, f"{where}: type {type(actual)} != {exp_type}"
    _assert_same_dtype(expected.dtype, actual.dtype, where)
    assert actual.shape == expected.shape, f"{where}: shape {actual.shape} != {expected.shape}"
    # Memory order: a contiguous array keeps its order, a non-contiguous one
    # comes back C-contiguous.
    if expected.flags.c_contiguous or not expected.flags.f_contiguous:
        assert actual.flags.c_contiguous, f"{where}: not C-contiguous"
    else:
        assert actual.flags.f_contiguous, f"{where}: not F-contiguous"
    if isinstance(expected, np.ma.MaskedArray):
        _assert_same_masked(expected, actual, where, mmap)
        return
    if expected.dtype.hasobject:
        flat_e = expected.view(np.ndarray).ravel(order="K")
        flat_a = actual.view(np.ndarray).ravel(order="K")
        for i, (e, a) in enumerate(zip(flat_e.tolist(), flat_a.tolist())):
            assert_same(e, a, f"{where}[{i}]", mmap=mmap)
        return
    assert _raw_bytes(actual) == _raw_bytes(expected), f"{where}: different bytes"
    if expected.flags.c_contiguous or expected.flags.f_contiguous:
        # stored without a copy: even the padding bytes must come back
        assert _memory_bytes(actual) == _memory_bytes(expected), f"{where}: different bytes"
    if exp_type not in (np.ndarray, np.memmap):  # np.matrix's attributes, ...
        assert_same(vars(expected), vars(actual), f"{where}.__dict__", mmap=mmap)


def _assert_same_masked(expected, actual, where, mmap):
    _assert_same_array(expected.data, actual.data, f"{where}.data", mmap)
    assert (expected.mask is np.ma.nomask) == (actual.mask is np.ma.nomask), (
        f"{where}: mask {actual.mask!r} != {expected.mask!r}"
    )
    if expected.mask is not np.ma.nomask:
        _assert_same_array(expected.mask, actual.mask, f"{where}.mask", mmap)
    assert actual.hardmask == expected.hardmask, f"{where}: hardmask"
    exp_fill = np.asarray(expected.fill_value)
    act_fill = np.asarray(actual.fill_value)
    assert exp_fill.dtype == act_fill.dtype and exp_fill.tobytes() == act_fill.tobytes(), (
        f"{where}: fill_value {actual.fill_value!r} != {expected.fill_value!r}"
    )


def _same_scalar(expected, actual):
    if isinstance(expected, float) and expected != expected:
        return actual != actual
    return expected == actual


def assert_same(expected, actual, where="obj", *, mmap=False):
    """Assert that ``actual`` is an exact copy of ``expected``.

    ``mmap=True`` lets plain ndarrays come back as ``np.memmap``.
    """
    if expected is np.ma.masked:  # a singleton whose fill_value getter fails
        assert actual is np.ma.masked, f"{where}: {actual!r} is not np.ma.masked"
        return
    if isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), f"{where}: {type(actual)} is not an array"
        _assert_same_array(expected, actual, where, mmap)
        return
    assert type(actual) is type(expected), f"{where}: type {type(actual)} != {type(expected)}"
    if isinstance(expected, np.generic):
        _assert_same_dtype(expected.dtype, actual.dtype, where)
        if expected.dtype.hasobject:
            assert_same(expected.item(), actual.item(), where, mmap=mmap)
        else:
            assert np.array(actual).tobytes() == np.array(expected).tobytes(), (
                f"{where}: {actual!r} != {expected!r}"
            )
    elif isinstance(expected, np.dtype):
        _assert_same_dtype(expected, actual, where)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected), f"{where}: keys {list(actual)} != {list(expected)}"
        for key in expected:
            assert_same(expected[key], actual[key], f"{where}[{key!r}]", mmap=mmap)
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{where}: length"
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_same(e, a, f"{where}[{i}]", mmap=mmap)
    elif isinstance(expected, (set, frozenset)):
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"
    elif isinstance(expected, (type(None), bool, int, float, complex, str, bytes,
                               bytearray)):
        assert _same_scalar(expected, actual), f"{where}: {actual!r} != {expected!r}"
    elif hasattr(expected, "__dict__"):
        assert_same(vars(expected), vars(actual), f"{where}.__dict__", mmap=mmap)
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


# -- round trips -------------------------------------------------------------

class _Thread(threading.Thread):
    """A thread that keeps the exception of its target for ``join_checked``."""

    def __init__(self, target):
        super().__init__(daemon=True)
        self._func = target
        self.error = None

    def run(self):
        try:
            self._func()
        except BaseException as exc:  # re-raised on the test's thread
            self.error = exc

    def join_checked(self):
        self.join(60)
        assert not self.is_alive(), "thread hung"
        if self.error is not None:
            raise self.error


def run_threads(work, args):
    """Run ``work(arg)`` for each of ``args`` on threads at once; re-raise
    the first failure on the test's thread."""
    threads = [_Thread(lambda arg=arg: work(arg)) for arg in args]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join_checked()


#: One read of :func:`spy_reads`: where, how many bytes, and on which thread.
Read = namedtuple("Read", "offset length thread")


def spy_reads(monkeypatch, first_waits=0.0):
    """Every read from local files from now on, a :class:`Read` each, made
    through the real source. With ``first_waits``, the first read sleeps
    that many seconds first: long enough for any pool thread the reading
    started to claim work."""
    from cpersist.container.sources import LocalFileSource

    reads, first = [], threading.Lock()
    real = LocalFileSource.read_into

    def read_into(self, offset, buffer):
        reads.append(Read(offset, memoryview(buffer).nbytes, threading.get_ident()))
        if first_waits and first.acquire(blocking=False):
            time.sleep(first_waits)
        return real(self, offset, buffer)

    monkeypatch.setattr(LocalFileSource, "read_into", read_into)
    return reads


def assert_same_result(expected, actual, where=""):
    """Type, dtype (with byte order), shape and bytes of an indexing result."""
    assert type(actual) is type(expected), f"{where}: {type(actual)} != {type(expected)}"
    if isinstance(expected, np.ndarray):
        assert actual.shape == expected.shape, f"{where}: shape {actual.shape}"
    assert actual.dtype == expected.dtype and actual.dtype.str == expected.dtype.str, where
    assert (np.ascontiguousarray(actual).tobytes()
            == np.ascontiguousarray(expected).tobytes()), f"{where}: values differ"


def dump_to_pipe_and_load(obj, load_kwargs=None, **dump_kwargs):
    """``dump`` into a pipe on a thread while ``load`` reads its other end.

    Both ends are non-seekable: this checks sequential writing and the
    loader's spooling of a non-seekable source.
    """
    read_fd, write_fd = os.pipe()
    reader = os.fdopen(read_fd, "rb")
    writer = os.fdopen(write_fd, "wb")

    def produce():
        with writer:
            # an fd-backed file has an int name: dump reports no file name
            assert cpersist.dump(obj, writer, **dump_kwargs) == []

    thread = _Thread(produce)
    thread.start()
    try:
        with reader:
            out = cpersist.load(reader, **(load_kwargs or {}))
    finally:
        thread.join_checked()
    return out


def pipe_bytes(data):
    """A readable non-seekable pipe fed ``data`` by a thread; returns (file, thread)."""
    read_fd, write_fd = os.pipe()
    reader = os.fdopen(read_fd, "rb")
    writer = os.fdopen(write_fd, "wb")

    def produce():
        with writer:
            try:
                writer.write(data)
            except BrokenPipeError:
                pass

    thread = _Thread(produce)
    thread.start()
    return reader, thread


def roundtrip(obj, how="bytesio", tmp_path=None, *, load_kwargs=None, **dump_kwargs):
    """Dump ``obj`` to the target kind ``how`` and load it back from it."""
    load_kwargs = load_kwargs or {}
    if how in ("path", "pathlib"):
        path = tmp_path / "obj.cp"
        target = str(path) if how == "path" else path
        assert cpersist.dump(obj, target, **dump_kwargs) == [str(path)]
        return cpersist.load(target, **load_kwargs)
    if how == "bytesio":
        buf = io.BytesIO()
        buf.write(b"prefix")  # dump and load work from the current position
        assert cpersist.dump(obj, buf, **dump_kwargs) == []
        buf.seek(len(b"prefix"))
        return cpersist.load(buf, **load_kwargs)
    if how == "file":
        path = tmp_path / "obj.cp"
        with open(path, "wb") as file:
            assert cpersist.dump(obj, file, **dump_kwargs) == [str(path)]
        with open(path, "rb") as file:
            return cpersist.load(file, **load_kwargs)
    if how == "pipe":
        return dump_to_pipe_and_load(obj, load_kwargs, **dump_kwargs)
    raise AssertionError(how)


def roundtrip_bytes(obj, *, load_kwargs=None, **dump_kwargs):
    """``dumps`` then ``loads`` of a ``bytearray`` (raw arrays are writable
    views of it), checking that ``loads`` of the ``bytes`` (read-only views)
    and a copying ``loads`` give the same object: the same dump again.
    The loaded objects are compared through raw dumps (default chunks): how
    the first was compressed is not what differs between them.
    """
    load_kwargs = load_kwargs or {}
    data = cpersist.dumps(obj, **dump_kwargs)
    assert type(data) is bytes
    out = cpersist.loads(bytearray(data), **load_kwargs)
    again = cpersist.dumps(out)
    for other in (cpersist.loads(data, **load_kwargs),
                  cpersist.loads(data, copy=True, **load_kwargs)):
        assert cpersist.dumps(other) == again
    return out


@pytest.fixture(params=["file", "bytes"])
def rt(request, tmp_path):
    """``rt(obj, how='bytesio', **dump_kwargs)``: a :func:`roundtrip` in
    ``tmp_path``, and again through ``dumps``/``loads`` (whatever ``how``,
    unless the case is about memory maps)."""
    def run(obj, how="bytesio", **kwargs):
        if request.param == "bytes" and "mmap_mode" not in kwargs.get("load_kwargs", {}):
            return roundtrip_bytes(obj, **kwargs)
        return roundtrip(obj, how, tmp_path, **kwargs)
    return run


def random_array(dtype, shape, order="C", seed=0):
    """An array of ``dtype`` and ``shape`` filled with valid, varied values.

    Bytes are random where every bit pattern is a valid value; bools, strings
    and objects get valid contents.
    """
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    arr = np.zeros(shape, dtype=dtype, order=order)
    _fill(arr, rng)
    return arr


def _fill(arr, rng):
    dtype = arr.dtype
    if dtype.names:
        for name in dtype.names:
            _fill(arr[name], rng)
        return
    n = arr.size
    if n == 0:
        return
    if dtype.kind == "b":
        arr[...] = (rng.integers(0, 2, arr.shape)).astype(bool)
    elif dtype.kind == "U":
        chars = np.array(list("aé€𝄞xyz "))
        arr[...] = np.array(["".join(rng.choice(chars, dtype.itemsize // 4))
                             for _ in range(n)]).reshape(arr.shape)
    elif dtype.kind == "O":
        values = [None, "text", [1, [2.5, None]], {"k": (1, 2)}, 3]
        flat = np.empty(n, dtype=object)
        for i in range(n):
            flat[i] = values[i % len(values)]
        arr[...] = flat.reshape(arr.shape)
    elif dtype.type in (np.longdouble, np.clongdouble):
        # long double: its padding bytes are not kept by every numpy copy
        arr[...] = rng.standard_normal(arr.shape) * 1e3
    elif dtype.kind in "Mm":  # plausible dates and durations, a few NaT
        ints = arr.view(np.dtype("i8").newbyteorder(dtype.byteorder))
        ints[...] = rng.integers(-10**12, 10**12, arr.shape)
        ints.flat[::7] = np.iinfo(np.int64).min
    else:
        data = rng.integers(0, 256, n * dtype.itemsize, dtype=np.uint8)
        arr[...] = np.frombuffer(data.tobytes(), dtype=dtype).reshape(arr.shape)


#: What the dask workers' environment lacks: no credentials nor endpoint of
#: any store, so that a worker reaches one only through the storage options
#: a lazy array carries.
_WORKER_ENV_REMOVED = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                       "AWS_ENDPOINT_URL", "AWS_PROFILE")


@pytest.fixture(scope="module")
def dask_client():
    """A ``distributed.Client`` of a local cluster: two worker processes, one
    thread each, on 127.0.0.1 (ports chosen by the system, no dashboards)."""
    import distributed

    with pytest.MonkeyPatch.context() as patch:
        # The workers are started with the environment as it is here; they
        # keep it, whatever the tests do to the test process's afterwards.
        for name in _WORKER_ENV_REMOVED:
            patch.delenv(name, raising=False)
        # Nor may they look for credentials in files or on the network.
        patch.setenv("AWS_CONFIG_FILE", "/nonexistent")
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        patch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        # The scheduler's HTTP server (health, metrics) always listens: on a
        # port chosen by the system, as 8787, its default, may be taken (and
        # the fallback leaks a socket); no dashboard on it.
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           host="127.0.0.1", scheduler_port=0,
                                           dashboard_address="127.0.0.1:0",
                                           scheduler_kwargs={"dashboard": False},
                                           worker_dashboard_address=None)
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


@contextlib.contextmanager
def every_array_a_section():
    """Raw dumps give every array a section of its own, whatever its size
    (by default those under ``RAW_INLINE_BELOW`` bytes stay in the pickle
    stream): for the tests of sections themselves (memory maps, lazy
    arrays, the index, their paths) on arrays of any size. A context
    manager, for hypothesis tests, which take no function-scoped fixture."""
    from cpersist.pickling import write

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(write, "RAW_INLINE_BELOW", 0)
        yield


@pytest.fixture
def sections():
    """:func:`every_array_a_section` around a test."""
    with every_array_a_section():
        yield
