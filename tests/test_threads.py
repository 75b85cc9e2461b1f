"""Loading on several threads: which way a section is read, and that every
way gives back the same bytes or the same error."""

import gzip
import io
import os
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import cpersist
from cpersist import CorruptFileError
from cpersist._runtime import parallel as _parallel
from cpersist.container.files import local_fd
from cpersist.codecs import get_codec
from cpersist.container import VERBATIM, ContainerReader

from ._fresh import run_code
from .conftest import assert_same
from .test_codecs import smooth_map

CHUNK = 1 << 16


def mixed(noise_share, n_chunks=40):
    """uint64 data of ``n_chunks`` chunks: random bits (stored as is) for
    ``noise_share`` of them, a smooth map's bits (encoded) for the rest."""
    n = n_chunks * CHUNK // 8
    noisy = int(n * noise_share)
    rng = np.random.default_rng(0)
    return np.concatenate([rng.integers(0, 2**64 - 1, noisy, dtype=np.uint64, endpoint=True),
                           smooth_map(n - noisy).astype(np.float64).view(np.uint64)])


def stored_share(path):
    """Share of the largest section's bytes in chunks stored as is."""
    with open(path, "rb") as file:
        section = max(ContainerReader(file, str(path)).sections, key=lambda s: s.raw_size)
        return sum(chunk.raw_length for chunk in section.chunks
                   if chunk.flag == VERBATIM) / section.raw_size


@pytest.fixture
def claimed(monkeypatch):
    """Counts the sections read with each thread claiming chunks."""
    calls = []
    real = ContainerReader._decode_claimed

    def spy(self, section, out, verify, n_threads):
        calls.append((section.index, n_threads))
        return real(self, section, out, verify, n_threads)
    monkeypatch.setattr(ContainerReader, "_decode_claimed", spy)
    return calls


@pytest.mark.parametrize("noise_share, n_threads", [(0.25, 2), (0.25, 3), (0.25, 8),
                                                     (0.75, 2), (1.0, 2)])
def test_each_thread_claims_chunks_of_a_section_from_a_file(tmp_path, claimed, noise_share,
                                                            n_threads):
    """Whether decoding or reading is the work: every thread copies out of
    the page cache, checks and decodes the chunks it claims."""
    arr = mixed(noise_share, n_chunks=80)
    path = tmp_path / "a.cp"
    cpersist.dump(arr, path, compress=3, chunk_size=CHUNK)
    assert stored_share(path) == pytest.approx(noise_share, abs=0.05)
    assert_same(arr, cpersist.load(path, n_threads=n_threads))
    assert [n for _, n in claimed] == [n_threads]
    # One thread: the chunks are read in order by the calling thread.
    assert_same(arr, cpersist.load(path, n_threads=1))
    assert len(claimed) == 1


@pytest.mark.parametrize("compress", [0, 3])
def test_chunks_stored_as_they_are_are_checked_as_they_are_read(tmp_path, monkeypatch,
                                                                claimed, compress):
    """Each part checksummed as it is read, never a whole chunk afterwards
    (which would read it from memory a second time); by this thread alone
    below COPY_ALONE_BELOW, by every thread above it."""
    from cpersist.container import sections as reader_module

    part = 1 << 18  # chunks of several parts (the default part is a whole default chunk)
    monkeypatch.setattr(reader_module, "READ_PART", part)
    checked_by = []
    real = reader_module.checksum_state

    def spy():
        checked_by.append(threading.get_ident())
        return real()
    monkeypatch.setattr(reader_module, "checksum_state", spy)
    real_check = ContainerReader._check

    def check_after_read(reader, section, data, expected):
        # Only a pickle stream taken from the bytes read with the index is
        # checked once it is in memory: it is never read a second time.
        if section.index != reader.root:
            pytest.fail("a chunk checked after it was read")
        return real_check(reader, section, data, expected)
    monkeypatch.setattr(ContainerReader, "_check", check_after_read)
    rng = np.random.default_rng(0)
    for n_bytes, threads in ((_parallel.COPY_ALONE_BELOW - CHUNK, []),
                             (_parallel.COPY_ALONE_BELOW + CHUNK, [2])):
        arr = rng.integers(0, 256, n_bytes, dtype=np.uint8)  # noise: stored as is
        path = tmp_path / f"{n_bytes}.cp"
        cpersist.dump(arr, path, compress=compress, chunk_size=1 << 20)
        checked_by.clear()
        claimed.clear()
        assert_same(arr, cpersist.load(path, n_threads=2))
        # Once per chunk of the array read in several parts (one read in
        # one part, as the pickle stream, is checked in one call).
        assert len(checked_by) == sum(min(1 << 20, n_bytes - at) > part
                                      for at in range(0, n_bytes, 1 << 20))
        assert [n for _, n in claimed] == threads
        if not threads:
            assert set(checked_by) == {threading.get_ident()}


def test_a_raw_chunk_is_read_and_checked_in_one_call_each(tmp_path, monkeypatch, claimed):
    """Threads reading raw chunks side by side share the GIL only when each
    call that releases it lasts: a chunk of the default size is read by one
    read and checked by one checksum call, not part by part."""
    from cpersist.container import sections as reader_module
    from cpersist.container.sources.local import LocalFileSource

    arr = np.random.default_rng(0).random((10 << 20) // 8)  # chunks of 4, 4 and 2 MiB
    path = tmp_path / "a.cp"
    cpersist.dump(arr, path)
    reads, checked = [], []
    real_read, real_checksum = LocalFileSource.read_into, reader_module.checksum

    def read_into(self, offset, buffer):
        reads.append(memoryview(buffer).nbytes)
        return real_read(self, offset, buffer)

    def checksum(data):
        checked.append(memoryview(data).nbytes)
        return real_checksum(data)
    monkeypatch.setattr(LocalFileSource, "read_into", read_into)
    monkeypatch.setattr(reader_module, "checksum", checksum)
    monkeypatch.setattr(reader_module, "checksum_state",
                        lambda: pytest.fail("a chunk checksummed part by part"))
    assert_same(arr, cpersist.load(path, n_threads=2))
    assert [n for _, n in claimed] == [2]
    chunks = [4 << 20, 4 << 20, (10 << 20) - (8 << 20)]
    assert sorted(n for n in reads if n > 1 << 16) == sorted(chunks)
    assert sorted(n for n in checked if n > 1 << 16) == sorted(chunks)


def test_claimed_chunks_from_a_file_object_at_an_offset(tmp_path, claimed):
    arr = mixed(0.0)
    path = tmp_path / "a.bin"
    with open(path, "wb") as file:
        file.write(b"header of another format " * 10)
        start = file.tell()
        cpersist.dump({"x": arr}, file, compress="zstd", chunk_size=CHUNK)
    for mode in ("rb", "r+b"):
        with open(path, mode) as file:
            file.seek(start)
            assert_same({"x": arr}, cpersist.load(file, n_threads=2))
    assert len(claimed) == 2


def test_wrapping_file_objects_are_read_through_their_readinto(tmp_path, claimed):
    """A gzip file has a descriptor too, of the compressed bytes: reading
    chunks from that descriptor would read the wrong bytes."""
    arr = mixed(0.0)
    path = tmp_path / "a.cp.gz"
    with gzip.open(path, "wb") as file:
        cpersist.dump(arr, file, compress="zstd", chunk_size=CHUNK)
    with gzip.open(path, "rb") as file:
        assert file.fileno() and file.seekable()
        assert local_fd(file) is None
        assert_same(arr, cpersist.load(file, n_threads=2))
    assert local_fd(io.BytesIO(b"x")) is None
    with open(path, "rb") as file:
        assert local_fd(file) == file.fileno()
    assert claimed == []


@pytest.mark.parametrize("n_threads", [2, 4])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("compress", ["zstd", 0])  # chunks encoded; stored as they are
def test_damaged_chunk_found_by_any_thread(tmp_path, claimed, where, n_threads, compress):
    arr = mixed(0.0, n_chunks=80)
    path = tmp_path / "a.cp"
    cpersist.dump(arr, path, compress=compress, chunk_size=CHUNK)
    with open(path, "rb") as file:
        reader = ContainerReader(file, str(path))
        section = max(reader.sections, key=lambda s: s.raw_size)
        chunks, base = section.chunks, reader.base
    k = {"first": 0, "middle": len(chunks) // 2, "last": len(chunks) - 1}[where]
    data = bytearray(path.read_bytes())
    data[base + chunks[k][0] + chunks[k][1] // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="checksum mismatch in section") as info:
        cpersist.load(path, n_threads=n_threads)
    assert str(path) in str(info.value)
    # With the checksums skipped, the codec reports the damage (or decodes
    # other bytes, never silently the same ones).
    try:
        out = cpersist.load(path, n_threads=n_threads, verify=False)
    except CorruptFileError as exc:
        assert f"section {section.index}" in str(exc)
    else:
        assert not np.array_equal(out, arr)
    # Unchecked, a raw section is one read.
    assert len(claimed) == (2 if compress else 1)


def test_a_failure_stops_the_other_threads(tmp_path, monkeypatch):
    """Once a thread fails, the others take no new chunk, and the load
    returns only after they have stopped writing."""
    arr = mixed(0.0)
    path = tmp_path / "a.cp"
    cpersist.dump(arr, path, compress="zstd", chunk_size=CHUNK)
    codec_type = type(get_codec("zstd"))
    decoded, finished = [], []
    real = codec_type.decode_into

    def slow(self, src, out):
        first = not decoded  # atomic under the GIL with the append below
        decoded.append(1)
        time.sleep(0.02)
        if first:
            raise CorruptFileError("the first decode fails")
        real(self, src, out)
        finished.append(1)
    monkeypatch.setattr(codec_type, "decode_into", slow)
    with pytest.raises(CorruptFileError, match="the first decode fails"):
        cpersist.load(path, n_threads=2)
    count = len(finished)
    time.sleep(0.1)
    assert len(finished) == count  # nothing left running after the load
    assert len(decoded) <= 3  # of 40 chunks: the other thread stopped


def test_the_thread_pool_imports_no_thread_pool_module(tmp_path):
    """``import cpersist``, one-threaded work and the pool's threads leave
    concurrent.futures (and the logging it imports) unimported."""
    path = tmp_path / "a.cp"
    code = (
        "import sys, numpy as np, cpersist\n"
        "seen = ['concurrent.futures' in sys.modules]\n"
        f"cpersist.dump(np.arange(10**6), {str(path)!r}, compress='zlib', chunk_size=1 << 16,"
        " n_threads=1)\n"
        "seen.append('concurrent.futures' in sys.modules)\n"
        f"back = cpersist.load({str(path)!r}, n_threads=2)\n"
        "assert (back == np.arange(10**6)).all()\n"
        "seen.append('concurrent.futures' in sys.modules)\n"
        "print(seen)\n"
    )
    out = run_code(code, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[False,", "False,", "False]"]


def _spread_calls(meet=0, fail=None, slow=None):
    """``(calls, func)``: ``func(start, stop)`` records ``(i, thread, start)``
    in ``calls`` for each item of its run. With ``meet``, each of that many
    threads' first call waits for the others' (a thread that never comes
    breaks the barrier: the test fails rather than passes by luck);
    ``fail`` is an item whose call raises, ``slow`` one whose call sleeps
    first."""
    calls = []
    met = set()
    barrier = threading.Barrier(meet, timeout=30) if meet else None

    def func(start, stop):
        thread = threading.get_ident()
        if barrier is not None and thread not in met:
            met.add(thread)
            barrier.wait()
        if slow in range(start, stop):
            time.sleep(0.2)
        if fail in range(start, stop):
            raise ValueError(f"item {fail} fails")
        calls.extend((i, thread, start) for i in range(start, stop))
    return calls, func


def _covered_once(calls, n_items):
    return sorted(i for i, _, _ in calls) == list(range(n_items))


def test_spread_alone_makes_one_call_on_this_thread():
    calls, func = _spread_calls()
    _parallel.spread(func, 5)
    assert calls == [(i, threading.get_ident(), 0) for i in range(5)]
    _parallel.run_claimed(lambda claims: [_parallel.spread(func, 3) for _ in claims], 4, 1,
                         helping=True)
    assert len(calls) == 5 + 4 * 3


@pytest.mark.parametrize("n_threads", [2, 3])
def test_spread_uses_the_threads_an_item_leaves_idle(n_threads):
    calls, func = _spread_calls(meet=n_threads)
    _parallel.run_claimed(lambda claims: [_parallel.spread(func, 40) for _ in claims], 1,
                         n_threads)
    assert _covered_once(calls, 40)
    assert len({thread for _, thread, _ in calls}) == n_threads
    # The spreading thread takes half of what is left at a time, so that
    # few calls return to Python; helpers take one item at a time.
    starts = sorted({start for _, _, start in calls})
    assert len(starts) < 40


def test_workers_out_of_items_help_the_others():
    """With ``helping``, a worker out of items runs calls of another's
    spread; without, it does not."""
    for helping in (True, False):
        calls, func = _spread_calls(meet=2 if helping else 0)
        owners = {}

        def task(claims):
            for item in claims:
                owners[item] = threading.get_ident()
                if item == 1:
                    _parallel.spread(func, 12)

        _parallel.run_claimed(task, 2, 2, helping=helping)
        assert _covered_once(calls, 12)
        threads = {thread for _, thread, _ in calls}
        # The helper may be a worker that found no item left at all.
        assert owners[1] in threads and len(threads) == (2 if helping else 1)


def test_spread_returns_after_every_call_and_raises_the_first_error():
    """The spreading thread waits for calls other threads are making (they
    write into its output), then raises a failed call's error."""
    for fail in (None, 30):
        calls, func = _spread_calls(meet=2, fail=fail, slow=20)

        def task(claims):
            for _ in claims:
                _parallel.spread(func, 40)
                task.returned = len(calls)

        if fail is None:
            _parallel.run_claimed(task, 1, 2)
            assert task.returned == len(calls) == 40
        else:
            with pytest.raises(ValueError, match="item 30 fails"):
                _parallel.run_claimed(task, 1, 2)
            done = len(calls)
            time.sleep(0.3)
            assert len(calls) == done and 20 in [i for i, _, _ in calls]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_forked_child_has_its_own_pool_and_locks(tmp_path):
    """A fork copies only the thread that calls it: the parent's pool has no
    threads in the child, and a lock another thread held stays held there.
    A child (multiprocessing's workers, a DataLoader's) dumps, loads and
    slices on threads of its own, and waits for nothing that cannot come."""
    path, child_path = tmp_path / "parent.cp", tmp_path / "child.cp"
    script = textwrap.dedent(f"""
        import os, pickle, signal, sys, threading, numpy as np, cpersist
        from cpersist.lazy import openfile as _openfile
        from cpersist._runtime.threads import get_pool
        from cpersist.codecs import registry
        from cpersist.container.buffers import READ_BUFFERS

        arr = np.cumsum(np.ones((20000, 500), np.int32), axis=1)  # 40 MB: several chunks
        cpersist.dump({{"a": arr}}, {str(path)!r}, compress=3, n_threads=2)  # the pool's threads
        held, forked = threading.Event(), threading.Event()

        def hold():  # another thread holds the locks while the fork is made
            with READ_BUFFERS._lock, _openfile._SHARED_LOCK, registry._lock:
                held.set()
                forked.wait()

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait()
        pid = os.fork()
        if pid == 0:
            signal.alarm(60)  # a child that waits forever ends, and fails
            code = 3
            try:
                worker = get_pool(2).submit(threading.get_ident).result(timeout=20)
                cpersist.dump({{"a": arr}}, {str(child_path)!r}, compress=3, n_threads=2)
                back = cpersist.load({str(child_path)!r}, n_threads=2)["a"]
                with cpersist.open({str(path)!r}, n_threads=2) as f:
                    lazy = pickle.loads(pickle.dumps(f.arrays["obj['a']"]))
                part = lazy[100:5000]
                if (worker != threading.get_ident() and np.array_equal(back, arr)
                        and np.array_equal(part, arr[100:5000])):
                    code = 0
            finally:
                os._exit(code)
        forked.set()
        holder.join()
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    """)
    done = run_code(script, timeout=120)
    assert done.returncode == 0


def test_arrays_read_ahead_are_allocated_on_the_calling_thread(tmp_path, monkeypatch):
    # The read-ahead decodes on the pool, but allocates every array first on
    # the calling thread: memory from a worker's malloc arena went back to
    # the kernel once freed, and each later load faulted it in again.
    from cpersist.pickling import read

    threads = []
    real = read._allocate

    def spy(*args):
        threads.append(threading.current_thread())
        return real(*args)

    monkeypatch.setattr(read, "_allocate", spy)
    obj = {f"w{i}": smooth_map(40_000 + i) for i in range(8)}
    path = tmp_path / "many.cp"
    cpersist.dump(obj, path, compress=3)
    assert_same(cpersist.load(path, n_threads=2), obj)
    assert len(threads) == 8 and set(threads) == {threading.current_thread()}


def test_the_worker_reads_items_the_calling_thread_has_prepared():
    """With ``prepare`` and two threads, the calling thread prepares every
    item its worker gets before the worker gets it, each at most once and
    none it has taken itself; alone, or with more threads, it prepares none."""
    for n_threads, expected in ((2, True), (1, False), (3, False)):
        prepared, by_caller, by_worker = [], [], []
        worker_ran = threading.Event()
        caller = threading.get_ident()

        def prepare(i):
            assert threading.get_ident() == caller and i not in by_caller
            prepared.append(i)

        def task(claims):
            for i in claims:
                if threading.get_ident() == caller:
                    by_caller.append(i)
                    # The second item is prepared for the worker first: wait for it.
                    worker_ran.wait(20 if expected else 0)
                else:
                    assert i in prepared or not expected
                    by_worker.append(i)
                    worker_ran.set()

        _parallel.run_claimed(task, 30, n_threads, prepare=prepare)
        assert sorted(by_caller + by_worker) == list(range(30))
        assert len(prepared) == len(set(prepared))
        assert bool(prepared) == expected and (bool(by_worker) or not expected)
        assert set(by_worker) <= set(prepared) or not expected


def test_a_failed_prepare_stops_the_work_and_frees_the_worker():
    prepared = []

    def prepare(i):
        prepared.append(i)
        if len(prepared) == 3:
            raise ValueError("no memory for it")

    def task(claims):
        for _ in claims:
            time.sleep(0.001)

    finished = []
    runner = threading.Thread(target=lambda: finished.append(pytest.raises(
        ValueError, _parallel.run_claimed, task, 40, 2, prepare=prepare)))
    runner.start()
    runner.join(30)
    assert finished and "no memory" in str(finished[0].value)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore of anonymous memory")
def test_new_pages_of_a_raw_section_are_faulted_in_by_the_calling_thread(tmp_path, monkeypatch):
    """Its worker reads into pages the calling thread has faulted in, chunk
    by chunk, when they are new; memory whose pages are backed already (a
    program's reused memory) is read into as it is, without asking the
    kernel again. The bytes and the checks are those of any load."""
    from cpersist._runtime import pages
    from cpersist.container.buffers import private_map

    advised = []
    real = pages.fault_in

    def spy(view):
        advised.append((threading.get_ident(), view.nbytes, _backed_pages(view)))
        return real(view)
    monkeypatch.setattr(pages, "fault_in", spy)
    arr = np.random.default_rng(0).random((_parallel.COPY_ALONE_BELOW + 40 * CHUNK) // 8)
    path = tmp_path / "a.cp"
    cpersist.dump(arr, path, chunk_size=CHUNK)
    with open(path, "rb") as file:
        reader = ContainerReader(file, str(path))
        section = max(reader.sections, key=lambda s: s.raw_size)
        fresh = private_map(section.raw_size)  # new memory, private as a load's
        try:
            reader.read_into(section, fresh, n_threads=2)
            assert fresh[:] == arr.tobytes()
        finally:
            fresh.close()
        assert advised and {thread for thread, _, _ in advised} == {threading.get_ident()}
        assert all(n == CHUNK and backed == 0 for _, n, (backed, _) in advised), advised
        advised.clear()
        used = np.ones(section.raw_size, np.uint8)
        reader.read_into(section, used, n_threads=2)
        assert advised == [] and used.tobytes() == arr.tobytes()
    assert_same(arr, cpersist.load(path, n_threads=2))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="checksum mismatch in section"):
        cpersist.load(path, n_threads=2)


def _backed_pages(view):
    """``(backed, whole)``: how many of the whole pages in ``view`` (writable
    bytes) are backed with memory (mincore), and how many there are."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    address = ctypes.addressof(ctypes.c_char.from_buffer(view))
    start = -(-address // mmap.PAGESIZE) * mmap.PAGESIZE
    end = (address + view.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if end <= start:
        return 0, 0
    vector = ctypes.create_string_buffer((end - start) // mmap.PAGESIZE)
    if libc.mincore(start, end - start, vector) != 0:
        raise OSError(ctypes.get_errno(), "mincore failed")
    return sum(byte & 1 for byte in vector.raw), len(vector.raw)


def test_faulting_pages_in_leaves_their_bytes():
    from cpersist._runtime import pages

    buffer = bytearray(b"abc" * 100_000)
    did = pages.fault_in(memoryview(buffer)[5:])
    assert buffer == b"abc" * 100_000
    assert not pages.fault_in(memoryview(buffer)[:0])
    # Linux 5.14 and later take the advice.
    linux = sys.platform.startswith("linux")
    release = tuple(int(x) for x in os.uname().release.split(".")[:2]) if linux else ()
    assert did == (linux and release >= (5, 14))


def test_only_memory_never_backed_is_faulted_in_before_a_read():
    """:func:`~cpersist._runtime.pages.fault_in_fresh` backs the pages of
    memory just mapped (none backed), in one call, and leaves memory in use
    (every page backed) and small views alone; the bytes stay as they were."""
    import mmap

    from cpersist._runtime import pages

    linux = sys.platform.startswith("linux")
    release = tuple(int(x) for x in os.uname().release.split(".")[:2]) if linux else ()
    size = pages.FRESH_FROM + 3 * mmap.PAGESIZE
    fresh = mmap.mmap(-1, size)
    try:
        view = memoryview(fresh)[100:]
        assert _backed_pages(view)[0] == 0
        assert pages.fault_in_fresh(view) == (linux and release >= (5, 14))
        if linux and release >= (5, 14):
            backed, whole = _backed_pages(view)
            assert backed == whole > 0
        assert fresh[:] == bytes(size)
        view.release()
    finally:
        fresh.close()
    used = bytearray(b"xyz" * size)
    assert not pages.fault_in_fresh(memoryview(used))
    assert not pages.fault_in_fresh(memoryview(bytes(size)))  # read-only: never written
    small = mmap.mmap(-1, pages.FRESH_FROM - mmap.PAGESIZE)
    try:
        with memoryview(small) as view:
            assert not pages.fault_in_fresh(view)
            assert _backed_pages(view)[0] == 0
    finally:
        small.close()
    assert used == b"xyz" * size


@pytest.mark.parametrize("verify", [True, False])
def test_a_raw_array_of_one_chunk_asks_for_its_new_memory_backed(tmp_path, monkeypatch, verify):
    """The load of a raw array of one chunk (read by the calling thread
    alone, the general way or, checked, a file's one array's way) asks for
    the whole of its new memory to be backed before the read
    (:func:`~cpersist._runtime.pages.fault_in_fresh`), and gives back its
    bytes."""
    from cpersist.container import sections, single

    asked = []
    real = sections.fault_in_fresh

    def spy(view):
        asked.append(view.nbytes)
        return real(view)
    for reader_module in (sections, single):
        monkeypatch.setattr(reader_module, "fault_in_fresh", spy)
    arr = np.random.default_rng(3).random(1_000_000 // 8)
    cpersist.dump(arr, tmp_path / "a.cp")
    assert_same(arr, cpersist.load(tmp_path / "a.cp", verify=verify))
    assert asked == [arr.nbytes]


def test_wait_for_later_returns_once_the_work_handed_before_is_done():
    from cpersist._runtime.threads import run_later, wait_for_later

    started, done = threading.Event(), []

    def slow(mark):
        started.set()
        time.sleep(0.2)
        done.append(mark)

    run_later(slow, 1)
    run_later(done.append, 2)
    assert started.wait(5)
    wait_for_later()
    assert done == [1, 2]
