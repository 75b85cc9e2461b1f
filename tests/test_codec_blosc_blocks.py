"""Decoding some blocks of a Blosc chunk through the shipped C library."""

import ctypes
import os
import textwrap
import threading
import time

import numpy as np
import pytest

import cpersist
from cpersist._runtime import parallel as _parallel
from cpersist.codecs import blosc as blosc_module
from cpersist.codecs import blosc_blocks, get_codec, libblosc2

from ._fresh import run_code
from .test_codec_registry import imported_after

BLOSC_CODECS = ["zstd-auto", "blosc:lz4", "blosc:zstd", "blosc:zlib"]


def blosc2():
    """python-blosc2, the reference the shipped library's results are checked against."""
    import blosc2 as module

    return module


def _chunks():
    """(name, raw bytes, typesize) of chunks Blosc stores in different ways."""
    rng = np.random.default_rng(3)
    walk = np.cumsum(rng.integers(-2, 3, size=1_000_003), dtype=np.int32)  # ~4 MB, odd tail
    noise = rng.integers(0, 256, size=1_500_001, dtype=np.uint8)          # stored as is
    zeros = np.zeros(600_000, np.float64)                                  # a special chunk
    return [("walk", walk.view(np.uint8), 4), ("noise", noise, 1), ("zeros", zeros.view(np.uint8), 8)]


def _block_chunks(codec):
    """(name, raw bytes, encoded chunk, block size) of the chunks of
    :func:`_chunks` that ``codec`` stores as Blosc chunks."""
    for name, raw, typesize in _chunks():
        encoded = bytes(codec.encode(memoryview(raw), typesize=typesize))
        if encoded[:4] == b"\x28\xb5\x2f\xfd":
            continue  # zstd-auto kept a plain zstd frame: no blocks
        yield name, raw, encoded, blosc2().get_cbuffer_sizes(encoded)[2]


def test_the_shipped_library_is_used():
    """Otherwise parts of chunks decode one at a time, holding the GIL."""
    assert libblosc2.library().version == blosc2().blosclib_version.split()[0]


@pytest.mark.parametrize("codec_id", BLOSC_CODECS)
def test_headers_read_by_the_library_as_python_blosc2_reads_them(codec_id):
    codec = get_codec(codec_id)
    for name, raw, encoded, blocksize in _block_chunks(codec):
        sizes = blosc_blocks.cbuffer_sizes(encoded)
        assert sizes == blosc2().get_cbuffer_sizes(encoded), name
        assert sizes[0] == raw.size and sizes[1] == len(encoded) and sizes[2] == blocksize
        assert blosc_blocks.cbuffer_sizes(memoryview(encoded)[:32]) == sizes  # the header alone
    with pytest.raises(ValueError, match="16-byte header, got 15 bytes"):
        blosc_blocks.cbuffer_sizes(encoded[:15])
    rejected = bytearray(encoded[:32])
    rejected[8:12] = bytes(4)  # blocks of 0 bytes
    with pytest.raises(ValueError, match="Blosc error -?[0-9]+ reading the chunk header"):
        blosc_blocks.cbuffer_sizes(rejected)


@pytest.mark.parametrize("codec_id", ["zstd-auto", "blosc:lz4"])
def test_loading_and_slicing_blosc_chunks_never_imports_python_blosc2(tmp_path, codec_id):
    """python-blosc2's import pulls in an HTTP client and more: reading goes
    through the shipped library alone."""
    arr = np.cumsum(np.ones((4000, 500), np.int32), axis=1)
    path = tmp_path / "b.cp"
    cpersist.dump({"a": arr}, path, compress=codec_id)
    with cpersist.open(path) as f, open(path, "rb") as file:
        chunks = f.arrays["obj['a']"]._bind().section.chunks
        # Blosc's chunks, not zstd-auto's plain Zstandard frames.
        assert all(os.pread(file.fileno(), 4, c.offset) != b"\x28\xb5\x2f\xfd" for c in chunks)
    code = textwrap.dedent(f"""
        import numpy as np, cpersist
        arr = np.cumsum(np.ones((4000, 500), np.int32), axis=1)
        assert np.array_equal(cpersist.load({str(path)!r})["a"], arr)
        with cpersist.open({str(path)!r}) as f:
            assert np.array_equal(f.arrays["obj['a']"][1000:3000:3], arr[1000:3000:3])
        cpersist.verify({str(path)!r})  # every chunk's header and blocks
    """)
    assert imported_after(code, ("blosc2",)) == set()


@pytest.mark.parametrize("codec_id", BLOSC_CODECS)
@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_blocks_decode_as_a_full_decode(codec_id, n_threads):
    for name, raw, encoded, blocksize in _block_chunks(get_codec(codec_id)):
        nblocks = -(-raw.size // blocksize)
        for first, last in ((0, 0), (0, nblocks - 1), (nblocks - 1, nblocks - 1),
                            (1, min(3, nblocks - 1)), (nblocks // 2, nblocks - 1)):
            whole = bytearray(raw.size)
            blosc_blocks.decode_blocks(encoded, whole, first, last, blocksize, n_threads)
            lo, hi = first * blocksize, min(raw.size, (last + 1) * blocksize)
            assert bytes(whole[lo:hi]) == raw[lo:hi].tobytes(), (name, first, last)


def _ranges(size, blocksize, typesize):
    """(lo, hi) byte ranges on whole items: inside a block, across block
    edges, from the start, to the end, the whole chunk."""
    ranges = [(0, typesize), (blocksize - 4 * typesize, blocksize + 4 * typesize),
              (typesize, size), (size // 3, size - size // 5), (0, size),
              (size - typesize, size)]
    return [(lo - lo % typesize, hi - hi % typesize) for lo, hi in ranges
            if 0 <= lo < hi <= size]


@pytest.mark.parametrize("codec_id", BLOSC_CODECS)
def test_ranges_decode_straight_into_the_result(codec_id):
    for name, raw, encoded, blocksize in _block_chunks(get_codec(codec_id)):
        item = encoded[3]
        for lo, hi in _ranges(raw.size, blocksize, item):
            out = bytearray(b"\xee" * (hi - lo))
            assert blosc_blocks.decode_range(encoded, lo, out, blocksize), (name, lo, hi)
            assert bytes(out) == raw[lo:hi].tobytes(), (name, lo, hi)
        if item > 1:  # a range not on whole items is left to the caller
            assert not blosc_blocks.decode_range(encoded, 1, bytearray(item), blocksize)
            assert not blosc_blocks.decode_range(encoded, 0, bytearray(item + 1), blocksize)


def test_chunks_with_the_delta_filter_decode_whole():
    """The delta filter encodes each block against the chunk's first, so
    Blosc decodes a part of such a chunk without it wrongly: cpersist never
    writes one, and decodes one it reads whole."""
    blosc = blosc2()
    raw = np.cumsum(np.arange(1_000_000, dtype=np.int32) % 7, dtype=np.int32).view(np.uint8)
    encoded = bytes(blosc.compress2(raw, typesize=4, filters=[blosc.Filter.DELTA],
                                    codec=blosc.Codec.ZSTD, blocksize=1 << 16))
    assert encoded[16:22].count(3) == 1  # the header names the delta filter
    assert not blosc_blocks.decode_range(encoded, 1 << 17, bytearray(4000), 1 << 16)
    codec = get_codec("blosc:zstd")
    for lo, hi in _ranges(raw.size, 1 << 16, 4):
        out = bytearray(hi - lo)
        codec.decode_part_into(memoryview(encoded), lo, memoryview(out),
                               memoryview(bytearray(raw.size)))
        assert bytes(out) == raw[lo:hi].tobytes(), (lo, hi)


def test_threads_that_meet_the_library_loading_wait_for_it(monkeypatch):
    """A thread that finds the library being loaded by another waits for it
    rather than taking it for missing (and decoding the slow way)."""
    real = libblosc2._open
    started = threading.Event()

    def slow_open():
        started.set()
        time.sleep(0.2)
        return real()

    monkeypatch.setattr(libblosc2, "_open", slow_open)
    monkeypatch.setattr(libblosc2, "_library", None)
    raw = np.arange(300_000, dtype=np.int32).view(np.uint8)
    encoded = bytes(get_codec("blosc:lz4").encode(memoryview(raw), typesize=4))
    blocksize = blosc2().get_cbuffer_sizes(encoded)[2]
    results = []

    def decode():
        out = bytearray(8000)
        results.append(blosc_blocks.decode_range(encoded, 4000, out, blocksize)
                       and bytes(out) == raw[4000:12000].tobytes())

    first = threading.Thread(target=decode)
    first.start()
    started.wait()
    second = threading.Thread(target=decode)
    second.start()
    first.join()
    second.join()
    assert results == [True, True]


@pytest.mark.parametrize("codec_id", BLOSC_CODECS)
def test_parts_decode_as_python_blosc2_decodes_the_chunk(codec_id):
    """Parts on whole items decode straight into the result, others through
    the whole chunk: both give python-blosc2's bytes."""
    codec = get_codec(codec_id)
    for name, raw, typesize in _chunks():
        encoded = memoryview(bytes(codec.encode(memoryview(raw), typesize=typesize)))
        if encoded[:4] == b"\x28\xb5\x2f\xfd":
            continue  # zstd-auto kept a plain zstd frame
        reference = bytes(blosc2().decompress2(encoded))
        assert reference == raw.tobytes(), name
        ranges = [(lo - lo % typesize, hi - hi % typesize) for lo, hi in
                  ((0, 8), (262_144 - 4, 262_144 + 4), (raw.size // 3, raw.size))]
        for lo, hi in ranges + [(1, 3 * typesize + 2)]:
            out = bytearray(hi - lo)
            codec.decode_part_into(encoded, lo, memoryview(out), memoryview(bytearray(raw.size)))
            assert bytes(out) == reference[lo:hi], (name, lo, hi)


@pytest.fixture
def block_decodes(monkeypatch):
    """``(first, last, blocks in the chunk)`` of each call of the codecs'
    ``decode_blocks`` (Blosc's threads decoding blocks into scratch memory)."""
    calls = []
    real = blosc_module.decode_blocks

    def spy(src, whole, first, last, blocksize, n_threads=1):
        calls.append((first, last, -(-len(whole) // blocksize)))
        return real(src, whole, first, last, blocksize, n_threads)

    monkeypatch.setattr(blosc_module, "decode_blocks", spy)
    return calls


@pytest.mark.parametrize("codec_id", BLOSC_CODECS)
def test_whole_chunks_decode_through_kept_contexts(codec_id, block_decodes):
    """A whole chunk decodes through this thread's kept context (no mask)."""
    codec = get_codec(codec_id)
    calls = block_decodes
    for name, raw, typesize in _chunks():
        encoded = memoryview(bytes(codec.encode(memoryview(raw), typesize=typesize)))
        out = bytearray(raw.size)
        codec.decode_into(encoded, memoryview(out))
        assert bytes(out) == raw.tobytes(), name
    assert calls and all(first == 0 and last == nblocks - 1 for first, last, nblocks in calls)


def test_damaged_blocks_raise_or_differ_never_crash():
    """Blosc has no checksum of its own (cpersist's chunk checksums catch
    damage first); decoding damaged blocks unchecked must still only raise."""
    codec = get_codec("blosc:zstd")
    raw = np.cumsum(np.ones(400_000, np.int32)).view(np.uint8)
    encoded = bytes(codec.encode(memoryview(raw), typesize=4))
    blocksize = blosc2().get_cbuffer_sizes(encoded)[2]
    rng = np.random.default_rng(0)
    errors = range_errors = spread_errors = 0
    for position in rng.integers(64, len(encoded), size=200):
        damaged = bytearray(encoded)
        damaged[position] ^= 0xFF
        whole = bytearray(raw.size)
        try:
            blosc_blocks.decode_blocks(bytes(damaged), whole, 1, 2, blocksize, 2)
        except ValueError:
            errors += 1
        try:
            blosc_blocks.decode_range(bytes(damaged), blocksize - 40, bytearray(blocksize),
                                      blocksize)
        except ValueError:
            range_errors += 1
        try:  # spread over threads: an error in any run is raised
            _with_threads(2, blosc_blocks.decode_range, bytes(damaged), 40,
                          bytearray(raw.size - 80), blocksize)
        except ValueError:
            spread_errors += 1
    assert errors > 0 and range_errors > 0 and spread_errors > 0


def test_a_damaged_chunk_read_in_part_names_it(tmp_path):
    arr = np.cumsum(np.ones((3000, 500), np.int32), axis=1)
    path = tmp_path / "d.cp"
    cpersist.dump({"a": arr}, path, compress="blosc:zstd")
    with cpersist.open(path, verify=False) as f:
        lazy = f.arrays["obj['a']"]
        section = lazy._bind().section
        chunk = section.chunks[0]
    data = bytearray(path.read_bytes())
    data[chunk.offset + 16:chunk.offset + 4096] = b"\xff" * (4096 - 16)  # inside the block data
    path.write_bytes(data)
    with cpersist.open(path) as f:
        with pytest.raises(cpersist.CorruptFileError, match="section 0, chunk 0"):
            f.arrays["obj['a']"][10:20]


def test_thread_share():
    seen = {}

    def task(claims):
        for i in claims:
            seen[i] = _parallel.thread_share()

    assert _parallel.thread_share() == 1
    _parallel.run_claimed(task, 1, 3)
    assert seen == {0: 3}
    seen.clear()
    _parallel.run_claimed(task, 4, 2)
    assert set(seen.values()) == {1}
    assert _parallel.thread_share() == 1


def test_contexts_are_per_thread_and_per_thread_count():
    raw = np.cumsum(np.ones(300_000, np.int32)).view(np.uint8)
    encoded = bytes(get_codec("blosc:lz4").encode(memoryview(raw), typesize=4))
    blocksize = blosc2().get_cbuffer_sizes(encoded)[2]
    handles = {}
    both = threading.Barrier(2)

    def work(n, wait=False):
        blosc_blocks.decode_blocks(encoded, bytearray(raw.size), 0, 1, blocksize, n)
        handles[(threading.get_ident(), n)] = blosc_blocks._local.contexts[n].handle
        if wait:
            both.wait()  # both alive: a freed context's address is not reused

    threads = [threading.Thread(target=work, args=(n, True)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    work(1)
    work(2)
    assert len(set(handles.values())) == 4


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_forked_child_makes_its_own_contexts(tmp_path):
    """A context with threads made before a fork cannot be used in the child
    (its threads are not there): the child makes new ones and does not hang."""
    arr = np.cumsum(np.ones((4000, 500), np.int32), axis=1)
    path = tmp_path / "f.cp"
    cpersist.dump({"a": arr}, path, compress="blosc:zstd")
    script = textwrap.dedent(f"""
        import os, sys, numpy as np, cpersist
        with cpersist.open({str(path)!r}, n_threads=2) as f:
            lazy = f.arrays["obj['a']"]
            lazy[5:9]            # one chunk, two threads: a context with threads
            pid = os.fork()
            if pid == 0:
                part = lazy[7:30]
                os._exit(0 if part[0, 0] == 1 and part.shape == (23, 500) else 3)
            _, status = os.waitpid(pid, 0)
            sys.exit(os.waitstatus_to_exitcode(status))
    """)
    done = run_code(script, timeout=120)
    assert done.returncode == 0


def _with_threads(n_threads, func, *args):
    """``func(*args)`` with ``n_threads`` threads free to help it, as the
    one item of a :func:`~cpersist._runtime.parallel.run_claimed` of that many."""
    results = []
    _parallel.run_claimed(lambda claims: [results.append(func(*args)) for _ in claims], 1,
                         n_threads)
    return results[0]


class _GetitemSpy:
    """The shipped library, with each ``blosc2_getitem_ctx`` call recorded
    as ``(thread, first byte, last byte + 1)`` of the chunk. With ``meet``,
    the first call of each of that many threads waits for the others, so
    that a range spread over threads is seen decoding on each of them (a
    thread that never came would break the barrier: no silent pass)."""

    def __init__(self, lib, meet=0, meet_below=None):
        self._lib = lib
        self.calls = []
        self._met = set()
        self._barrier = threading.Barrier(meet, timeout=30) if meet else None
        self._meet_below = meet_below  # only calls for bytes before this one meet

    def __getattr__(self, name):
        return getattr(self._lib, name)

    def blosc2_getitem_ctx(self, context, src, srcsize, start, nitems, dest, destsize):
        typesize = ctypes.string_at(src, 4)[3]
        thread = threading.get_ident()
        if (self._barrier is not None and thread not in self._met
                and (self._meet_below is None or start * typesize < self._meet_below)):
            self._met.add(thread)
            self._barrier.wait()
        self.calls.append((thread, start * typesize, (start + nitems) * typesize))
        return self._lib.blosc2_getitem_ctx(context, src, srcsize, start, nitems, dest, destsize)


def _file_blocksize(path, chunk):
    """The Blosc block size of ``chunk``, a chunk of the file ``path``."""
    with open(path, "rb") as file:
        file.seek(chunk.offset)
        return blosc2().get_cbuffer_sizes(file.read(32))[2]


def _check_runs(calls, lo, hi, blocksize):
    """The recorded ranges cover ``lo:hi`` once, cut only between runs of
    whole blocks that a thread claims."""
    run = blocksize * max(1, blosc_blocks._CLAIM_BYTES // blocksize)
    covered = sorted((a, b) for _, a, b in calls)
    assert covered[0][0] == lo and covered[-1][1] == hi
    assert all(b == c for (_, b), (c, _) in zip(covered, covered[1:]))  # no gap, no overlap
    assert all(b % run == 0 for _, b in covered[:-1])


@pytest.mark.parametrize("codec_id", BLOSC_CODECS)
@pytest.mark.parametrize("n_threads", [2, 3])
def test_ranges_spread_over_threads_decode_straight_into_the_result(codec_id, n_threads,
                                                                     monkeypatch):
    """Each run of blocks is decoded once, by one of the threads, into its
    own part of the result; alone, one call decodes the whole range."""
    spy = _GetitemSpy(libblosc2.library())
    monkeypatch.setattr(blosc_blocks, "library", lambda: spy)
    for name, raw, encoded, blocksize in _block_chunks(get_codec(codec_id)):
        item = encoded[3]
        for lo, hi in _ranges(raw.size, blocksize, item):
            spy.calls.clear()
            out = bytearray(b"\xee" * (hi - lo))
            assert _with_threads(n_threads, blosc_blocks.decode_range, encoded, lo, out, blocksize)
            assert bytes(out) == raw[lo:hi].tobytes(), (name, lo, hi)
            _check_runs(spy.calls, lo, hi, blocksize)
            spy.calls.clear()
            out = bytearray(b"\xee" * (hi - lo))
            assert blosc_blocks.decode_range(encoded, lo, out, blocksize)
            assert bytes(out) == raw[lo:hi].tobytes(), (name, lo, hi)
            assert [(a, b) for _, a, b in spy.calls] == [(lo, hi)]


def test_a_range_of_many_blocks_decodes_on_every_thread_asked_for(monkeypatch):
    raw = np.cumsum(np.ones(2_000_000, np.int32)).view(np.uint8)  # 8 MB
    encoded = bytes(get_codec("blosc:lz4").encode(memoryview(raw), typesize=4))
    blocksize = blosc2().get_cbuffer_sizes(encoded)[2]
    spy = _GetitemSpy(libblosc2.library(), meet=3)
    monkeypatch.setattr(blosc_blocks, "library", lambda: spy)
    lo, hi = 1000, raw.size - 1000
    out = bytearray(hi - lo)
    assert _with_threads(3, blosc_blocks.decode_range, encoded, lo, out, blocksize)
    assert bytes(out) == raw[lo:hi].tobytes()
    assert len({thread for thread, _, _ in spy.calls}) == 3
    _check_runs(spy.calls, lo, hi, blocksize)


def test_lazy_slices_decode_only_their_blocks_on_the_threads_asked_for(tmp_path, block_decodes,
                                                                       monkeypatch):
    """A slice inside one chunk decodes only the blocks holding it, straight
    into the result; the blocks of a slice of several are spread over the
    threads asked for, which a slice of one chunk leaves idle."""
    arr = np.cumsum(np.ones((2000, 500), np.int32), axis=1, dtype=np.int32)  # 4 MB: one chunk
    path = tmp_path / "s.cp"
    cpersist.dump({"a": arr}, path, compress="blosc:zstd")
    whole_chunk_calls = block_decodes
    with cpersist.open(path, n_threads=2) as f:
        lazy = f.arrays["obj['a']"]
        section = lazy._bind().section
        blocksize = _file_blocksize(path, section.chunks[0])
        assert len(section.chunks) == 1
        row = arr.shape[1] * arr.itemsize
        spy = _GetitemSpy(libblosc2.library())
        monkeypatch.setattr(blosc_blocks, "library", lambda: spy)
        np.testing.assert_array_equal(lazy[300:310], arr[300:310])
        assert [(a, b) for _, a, b in spy.calls] == [(300 * row, 310 * row)]
        spy = _GetitemSpy(libblosc2.library(), meet=2)
        monkeypatch.setattr(blosc_blocks, "library", lambda: spy)
        np.testing.assert_array_equal(lazy[10:1990], arr[10:1990])
        assert len({thread for thread, _, _ in spy.calls}) == 2
        _check_runs(spy.calls, 10 * row, 1990 * row, blocksize)
        np.testing.assert_array_equal(lazy[:], arr)
    # Only the whole chunk went through a scratch-free full decode.
    assert whole_chunk_calls == [(0, whole_chunk_calls[0][2] - 1, whole_chunk_calls[0][2])]


def test_a_slice_mostly_in_one_of_two_chunks_keeps_both_threads_busy(tmp_path, monkeypatch):
    """The thread whose part of the slice is small helps decode the other
    part's blocks."""
    arr = np.cumsum(np.ones((3000, 500), np.int32), axis=1, dtype=np.int32)
    path = tmp_path / "u.cp"
    cpersist.dump({"a": arr}, path, compress="blosc:lz4", chunk_size=1 << 21)
    with cpersist.open(path, n_threads=2) as f:
        lazy = f.arrays["obj['a']"]
        rows = lazy.chunks[0][0]
        row = arr.shape[1] * arr.itemsize
        # 4 rows at the end of chunk 0, all but 4 rows of chunk 1.
        spy = _GetitemSpy(libblosc2.library(), meet=2, meet_below=(rows - 4) * row)
        monkeypatch.setattr(blosc_blocks, "library", lambda: spy)
        index = slice(rows - 4, 2 * rows - 4)
        np.testing.assert_array_equal(lazy[index], arr[index])
    # The parts are bytes 0:(rows - 4) * row of chunk 1 and the rest of chunk 0.
    large = [call for call in spy.calls if call[2] <= (rows - 4) * row]
    assert [(a, b) for _, a, b in spy.calls if b > (rows - 4) * row] == [
        ((rows - 4) * row, rows * row)]
    assert len({thread for thread, _, _ in large}) == 2
    _check_runs(large, 0, (rows - 4) * row, _file_blocksize(path, lazy._bind().section.chunks[1]))


# -- the library itself --------------------------------------------------------------

@pytest.mark.parametrize("codec_id, level", [("blosc:lz4", 3), ("blosc:zstd", 9),
                                             ("blosc:zlib", 1), ("blosc:blosclz", 5),
                                             ("zstd-auto", 3), ("zstd-auto", 9)])
def test_chunks_are_those_python_blosc2_makes(codec_id, level):
    """Files written through the shipped library are byte for byte those
    python-blosc2 wrote with the same parameters."""
    module = blosc2()
    codec = get_codec(codec_id, level)
    inner = {"blosc:lz4": module.Codec.LZ4, "blosc:zstd": module.Codec.ZSTD,
             "blosc:zlib": module.Codec.ZLIB, "blosc:blosclz": module.Codec.BLOSCLZ}
    for name, raw, typesize in _chunks():
        buf = memoryview(raw)
        if codec_id == "zstd-auto":
            got = codec._filtered(buf, typesize, 2)
            want = module.compress2(buf, typesize=typesize, clevel=2, codec=module.Codec.ZSTD,
                                    filters=[module.Filter.SHUFFLE, module.Filter.BYTEDELTA],
                                    blocksize=256 << 10, nthreads=1)
        else:
            got = codec.encode(buf, typesize=typesize)
            shuffle = typesize > 1
            want = module.compress2(buf, typesize=typesize, clevel=level, codec=inner[codec_id],
                                    filters=[module.Filter.SHUFFLE if shuffle
                                             else module.Filter.NOFILTER], nthreads=1)
        assert bytes(got) == bytes(want), name
    # A small sample first does not change how the next chunk is cut in blocks.
    walk = _chunks()[0][1]
    first = bytes(codec.encode(memoryview(walk), typesize=4))
    codec.encode(memoryview(walk)[:65536], typesize=4)
    assert bytes(codec.encode(memoryview(walk), typesize=4)) == first


@pytest.mark.parametrize("version", ["2.6.1", "4.0.0", "1.21.5", "unknown"])
def test_a_library_of_another_version_is_refused_naming_it(version):
    with pytest.raises(cpersist.CodecLibraryError, match=rf"/x/libblosc2.so is C-Blosc2 "
                       rf"{version.replace('.', '[.]')}; cpersist .* C-Blosc2 2[.]7 to 3[.]x"):
        libblosc2.check_version(version, "/x/libblosc2.so")
    libblosc2.check_version("2.7.0")
    libblosc2.check_version("3.3.5")


def test_without_the_library_blosc_files_raise_an_error_naming_it(tmp_path, monkeypatch):
    """Neither a corrupt-file error on load nor a half-written file on dump."""
    arr = np.cumsum(np.ones((300, 500), np.int32), axis=1)
    path = tmp_path / "b.cp"
    cpersist.dump(arr, path, compress="blosc:lz4")
    monkeypatch.setattr(libblosc2, "_library", None)
    monkeypatch.setattr(libblosc2.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(cpersist.CodecLibraryError, match="need the blosc2 package"):
        cpersist.load(path)
    with pytest.raises(cpersist.CodecLibraryError, match="need the blosc2 package"):
        cpersist.dump(arr, tmp_path / "c.cp", compress="blosc:zstd")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.cp"]
